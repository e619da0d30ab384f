"""Rule ``wait_cycle``: tasks and actors of Ray that wait on each other in a cycle.

The wait-for graph (one node per unfinished task, an edge "A waits on B"
from ``ray.get`` records and from actor queues) is built by
``wait_graph.py``; its names are importable from here too.

A cycle is reported when the same set of tasks forms one in
two consecutive snapshots, once while it lasts. A chain that ends in a task
waiting on nothing (an actor method that hangs) is no cycle: it is shown by
:func:`wait_chains` and :func:`render_text` (``diagnose``), not reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from trainprobe.sidecar.core.ray.snapshot import RayFinding, RaySnapshot
from trainprobe.sidecar.core.ray.wait_graph import (
    QUEUED_ACTOR_STATES,
    RUNNING_STATES,
    WaitEdge,
    WaitGraph,
    build_graph,
)

__all__ = [
    "QUEUED_ACTOR_STATES",
    "RULE",
    "RUNNING_STATES",
    "CycleJudge",
    "WaitEdge",
    "WaitGraph",
    "build_graph",
    "edge_record",
    "render_dot",
    "render_text",
    "wait_chains",
    "wait_cycles",
]

RULE = "wait_cycle"


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
