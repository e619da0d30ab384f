"""The wait-for graph of a Ray snapshot: who waits on whom.

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
consumer edges. Edges are kept only between unfinished tasks, once per pair,
and the wrapper's records (which know the objects) win over inferred ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainprobe.sidecar.core.ray.snapshot import ActorInfo, RaySnapshot, TaskInfo, producer_task_id

__all__ = ["QUEUED_ACTOR_STATES", "RUNNING_STATES", "WaitEdge", "WaitGraph", "build_graph"]

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
