"""Rule ``wait_cycle``: tasks and actors of Ray that wait on each other in a cycle.

The wait-for graph has one node per unfinished task (actor methods included)
and an edge "A waits on B" from three sources:

- ``get``, from a :class:`WaitRecord` with object ids (trainprobe's
  ``ray_wait.get`` wrapper): each object's producer task, read out of the
  ObjectID itself;
- ``get``, from a record of a sampled stack (py-spy shows the process inside
  ``ray.get`` but not on what): the task's unfinished children stand in for
  the objects. A child's ``parent_task_id`` is its submitter for plain tasks
  and one-thread actors; a threaded or async actor's children name the
  actor's creation task instead (Ray's doc), so they are not inferred;
- ``actor_queue``: an actor method that was submitted but does not run waits
  on the methods the actor is running (its concurrency slots are full).

Ray 2.60 does not report RUNNING_IN_RAY_GET for a task blocked in ``ray.get``
(it stays RUNNING; seen on a local cluster), so the state alone gives no
consumer edges. A cycle is reported when the same set of tasks forms one in
two consecutive snapshots, once while it lasts. A chain that ends in a task
waiting on nothing (an actor method that hangs) is no cycle: it is shown by
:func:`wait_chains` and :func:`render_text` (``diagnose``), not reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from trainprobe.sidecar.core.ray_snapshot import (
    ActorInfo,
    RayFinding,
    RaySnapshot,
    TaskInfo,
    producer_task_id,
)

RULE = "wait_cycle"
#: An actor method in one of these states is queued, not running.
QUEUED_ACTOR_STATES = frozenset(
    {"SUBMITTED_TO_WORKER", "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "PENDING_ARGS_AVAIL"}
)
RUNNING_STATES = frozenset({"RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT"})


@dataclass(frozen=True)
class WaitEdge:
    src: str
    dst: str
    #: "get" or "actor_queue".
    kind: str
    call_site: str = ""
    source: str = ""
    object_id: str = ""


@dataclass
class WaitGraph:
    tasks: dict[str, TaskInfo]
    actors: dict[str, ActorInfo]
    edges: list[WaitEdge]

    def out(self, task_id: str) -> list[WaitEdge]:
        return [e for e in self.edges if e.src == task_id]

    def describe(self, task_id: str) -> str:
        """``A.f on actor alpha (pid 123)`` or ``task square (pid 9)``."""
        task = self.tasks.get(task_id)
        if task is None:
            return f"task {task_id[:12]}"
        actor = self.actors.get(task.actor_id) if task.actor_id else None
        pid = task.pid or (actor.pid if actor else 0)
        where = (
            f"{task.name} on actor {actor.name or actor.class_name}"
            if actor
            else f"task {task.name}"
        )
        return f"{where} (pid {pid})" if pid else where


def build_graph(snap: RaySnapshot) -> WaitGraph:
    tasks = {t.task_id: t for t in snap.tasks if not t.done}
    actors = {a.actor_id: a for a in snap.actors}
    threaded_parents = {t.task_id for t in snap.tasks if t.type == "ACTOR_CREATION_TASK"}
    children: dict[str, list[str]] = {}
    for t in tasks.values():
        if t.parent_task_id and t.parent_task_id not in threaded_parents:
            children.setdefault(t.parent_task_id, []).append(t.task_id)
    edges: list[WaitEdge] = []
    seen: set[tuple[str, str]] = set()

    def add(edge: WaitEdge) -> None:
        if edge.src in tasks and edge.dst in tasks and (edge.src, edge.dst) not in seen:
            seen.add((edge.src, edge.dst))
            edges.append(edge)

    # Wrapper records first: they know the objects, so their edges win over inferred ones.
    for w in sorted(snap.waits, key=lambda w: w.source != "wrapper"):
        if w.objects:
            for oid in w.objects:
                add(WaitEdge(w.task_id, producer_task_id(oid), "get", w.call_site, w.source, oid))
        else:
            for child in children.get(w.task_id, ()):
                add(WaitEdge(w.task_id, child, "get", w.call_site, w.source))
    running: dict[str, list[str]] = {}
    for t in tasks.values():
        if t.actor_id and t.type == "ACTOR_TASK" and t.state in RUNNING_STATES:
            running.setdefault(t.actor_id, []).append(t.task_id)
    for t in tasks.values():
        if t.type == "ACTOR_TASK" and t.state in QUEUED_ACTOR_STATES:
            for busy in running.get(t.actor_id, ()):
                add(WaitEdge(t.task_id, busy, "actor_queue", source="state"))
    return WaitGraph(tasks, actors, edges)


def _sccs(nodes: list[str], adj: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on.add(v)
            nxt = adj.get(v, [])
            if i < len(nxt):
                work.append((v, i + 1))
                w = nxt[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def wait_cycles(snap: RaySnapshot | WaitGraph) -> list[list[WaitEdge]]:
    """One simple cycle per strongly connected component, as edges, starting at its smallest id."""
    graph = snap if isinstance(snap, WaitGraph) else build_graph(snap)
    adj: dict[str, list[str]] = {}
    by_pair = {(e.src, e.dst): e for e in graph.edges}
    for e in graph.edges:
        adj.setdefault(e.src, []).append(e.dst)
    cycles = []
    for comp in _sccs(sorted(adj), adj):
        members = set(comp)
        start = min(comp)
        if len(comp) == 1 and (start, start) not in by_pair:
            continue
        # A path back to start inside the component (BFS: the shortest one).
        prev: dict[str, str] = {}
        frontier = [start]
        found = ""
        while frontier and not found:
            nxt = []
            for v in frontier:
                for w in adj.get(v, []):
                    if w not in members:
                        continue
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        path = [found]
        while path[-1] != start:
            path.append(prev[path[-1]])
        path.reverse()
        nodes = [*path, start]
        cycles.append([by_pair[(a, b)] for a, b in pairwise(nodes)])
    return cycles


def wait_chains(graph: WaitGraph) -> list[list[str]]:
    """Longest wait chains ending in a task that waits on nothing (its head), longest first.

    Only tasks nobody waits on start a chain; tasks on a cycle are left out.
    """
    outs: dict[str, list[str]] = {}
    waited_on: set[str] = set()
    for e in graph.edges:
        outs.setdefault(e.src, []).append(e.dst)
        waited_on.add(e.dst)
    chains = []
    for start in sorted(set(outs) - waited_on):
        chain, v = [start], start
        while v in outs and outs[v][0] not in chain:
            v = outs[v][0]
            chain.append(v)
        if v not in outs:  # ends in a task that waits on nothing
            chains.append(chain)
    return sorted(chains, key=len, reverse=True)


def _edge_text(graph: WaitGraph, e: WaitEdge) -> str:
    if e.kind == "actor_queue":
        return f"{graph.describe(e.src)} is queued behind {graph.describe(e.dst)}"
    at = f" at {e.call_site}" if e.call_site else ""
    return f"{graph.describe(e.src)} waits{at} on {graph.describe(e.dst)}"


def edge_record(graph: WaitGraph, e: WaitEdge) -> dict[str, object]:
    src, dst = graph.tasks.get(e.src), graph.tasks.get(e.dst)
    return {
        "waiter": graph.describe(e.src),
        "waits_on": graph.describe(e.dst),
        "kind": e.kind,
        "call_site": e.call_site,
        "source": e.source,
        "object_id": e.object_id,
        "waiter_task_id": e.src,
        "waiter_pid": (src.pid if src else 0),
        "waits_on_task_id": e.dst,
        "waits_on_pid": (dst.pid if dst else 0),
        # What on_ray_finding=kill/restart ray.kills ("" for a plain task).
        "waiter_actor_id": (src.actor_id if src else ""),
    }


@dataclass
class CycleJudge:
    """Reports a cycle seen in two consecutive snapshots, once while it lasts."""

    previous: set[frozenset[str]] = field(default_factory=set)
    reported: set[frozenset[str]] = field(default_factory=set)

    def judge(self, snap: RaySnapshot, now: float) -> list[RayFinding]:
        graph = build_graph(snap)
        current = {frozenset(e.src for e in c): c for c in wait_cycles(graph)}
        findings = []
        for key, cycle in current.items():
            if key not in self.previous or key in self.reported:
                continue
            self.reported.add(key)
            job = next((graph.tasks[t].job_id for t in sorted(key) if t in graph.tasks), "")
            text = f"wait cycle of {len(cycle)} edges: " + "; ".join(
                _edge_text(graph, e) for e in cycle
            )
            evidence: dict[str, object] = {"edges": [edge_record(graph, e) for e in cycle]}
            if snap.truncated:
                evidence["truncated"] = list(snap.truncated)
            findings.append(
                RayFinding(RULE, "cycle:" + ",".join(sorted(key)), job, text, now, evidence)
            )
        self.reported &= set(current)  # a cycle that broke up may be reported again if it returns
        self.previous = set(current)
        return findings


def render_text(graph: WaitGraph) -> str:
    """The wait graph for ``diagnose``: cycles, then chains with their head, then other edges."""
    lines = []
    cycles = wait_cycles(graph)
    for c in cycles:
        lines.append(f"cycle ({len(c)} edges):")
        lines += [f"  {_edge_text(graph, e)}" for e in c]
    for chain in wait_chains(graph):
        lines.append(f"chain of {len(chain)}; head: {graph.describe(chain[-1])} waits on nothing")
        lines += [
            f"  {_edge_text(graph, e)}"
            for a, b in pairwise(chain)
            for e in graph.out(a)
            if e.dst == b
        ]
    if not lines:
        lines.append(f"no waits among {len(graph.tasks)} unfinished tasks")
    return "\n".join(lines)


def render_dot(graph: WaitGraph) -> str:
    """The wait graph in Graphviz DOT: waiters point at what they wait on."""
    used = {e.src for e in graph.edges} | {e.dst for e in graph.edges}

    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = ["digraph ray_waits {", "  rankdir=LR;"]
    lines += [f"  {q(t[:12])} [label={q(graph.describe(t))}];" for t in sorted(used)]
    for e in graph.edges:
        label = e.call_site if e.kind == "get" else "queued"
        lines.append(f"  {q(e.src[:12])} -> {q(e.dst[:12])} [label={q(label)}];")
    lines.append("}")
    return "\n".join(lines)
