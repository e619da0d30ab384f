"""A snapshot of what Ray is doing, as plain data, and what the Ray watcher finds in it.

The Ray adapter (``trainprobe.sidecar.ray.watcher``) fills these from Ray's
State API and GCS; the judges in :mod:`~trainprobe.sidecar.core.ray.placement`
and :mod:`~trainprobe.sidecar.core.ray.wait` read them. Nothing here imports Ray.

Times are Unix seconds (wall clock), unlike the rest of the core: Ray stamps
placement groups and tasks with wall-clock times, and the judges compare them
with the ``now`` they are given, so the adapter passes ``time.time()``.

Ids are Ray's hex strings. An ObjectID is its creating TaskID (24 bytes) plus
a 4-byte return index (checked on Ray 2.60: ``ref.task_id().hex()`` is the
first 48 hex digits of ``ref.hex()``), which is how a waiter on an object is
tied to the task that will produce it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainprobe.sidecar.core.judge.stackframes import ThreadStack

#: Hex digits of a TaskID; an ObjectID starts with its producer's TaskID.
TASK_ID_HEX = 48

#: Task states after which a task waits on nothing and nobody waits on it.
TERMINAL_TASK_STATES = frozenset({"FINISHED", "FAILED"})


def producer_task_id(object_id: str) -> str:
    """The task that creates ``object_id`` (for ``ray.put`` objects: the putting task)."""
    return object_id[:TASK_ID_HEX] if len(object_id) > TASK_ID_HEX else ""


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    alive: bool
    #: The node's total resources (``ray.nodes()[i]["Resources"]``), not what is free.
    total: dict[str, float]
    address: str = ""


@dataclass(frozen=True)
class Bundle:
    index: int
    resources: dict[str, float]
    node_id: str = ""


@dataclass(frozen=True)
class PlacementGroupInfo:
    pg_id: str
    name: str
    job_id: str
    #: PENDING, PREPARED, CREATED, REMOVED, RESCHEDULING.
    state: str
    #: ``stats.scheduling_state``: NO_RESOURCES, INFEASIBLE, FAILED_TO_COMMIT_RESOURCES, ...
    scheduling_state: str
    attempts: int
    bundles: tuple[Bundle, ...]
    strategy: str = "PACK"
    #: When the GCS received the request (Unix s); 0 when unknown.
    created_at: float = 0.0


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    name: str
    state: str
    #: NORMAL_TASK, ACTOR_TASK, ACTOR_CREATION_TASK, DRIVER_TASK.
    type: str = "NORMAL_TASK"
    job_id: str = ""
    actor_id: str = ""
    parent_task_id: str = ""
    pid: int = 0
    node_id: str = ""
    placement_group_id: str = ""

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_TASK_STATES


@dataclass(frozen=True)
class ActorInfo:
    actor_id: str
    name: str
    class_name: str
    state: str
    pid: int = 0
    node_id: str = ""
    job_id: str = ""
    placement_group_id: str = ""


@dataclass(frozen=True)
class WaitRecord:
    """One consumer edge source: task ``task_id`` is blocked in ``ray.get``/``ray.wait``.

    ``source`` is ``"wrapper"`` (trainprobe's ``ray_wait.get``: the object ids
    are known) or ``"stack"`` (a py-spy dump shows the process in ``ray.get``;
    the objects are not known, so the task's unfinished children stand in).
    """

    task_id: str
    call_site: str
    source: str
    objects: tuple[str, ...] = ()
    pid: int = 0
    since: float = 0.0


@dataclass(frozen=True)
class RaySnapshot:
    taken_at: float
    nodes: tuple[NodeInfo, ...] = ()
    pgs: tuple[PlacementGroupInfo, ...] = ()
    #: Unfinished tasks only: a finished one waits on nothing.
    tasks: tuple[TaskInfo, ...] = ()
    actors: tuple[ActorInfo, ...] = ()
    waits: tuple[WaitRecord, ...] = ()
    #: Lists that hit their limit ("tasks", ...): the graph may miss edges.
    truncated: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class RayFinding:
    """One thing the Ray watcher reports: rule ``placement_group`` or ``wait_cycle``."""

    rule: str
    #: Stable per problem (a placement group id, a cycle's task ids): one finding per key.
    key: str
    job_id: str
    text: str
    at: float
    evidence: dict[str, object] = field(default_factory=dict)

    def to_record(self) -> dict[str, object]:
        """The incident-log shape (JSON-ready)."""
        return {
            "rule": self.rule,
            "key": self.key,
            "job_id": self.job_id,
            "text": self.text,
            "at": self.at,
            **self.evidence,
        }


def fmt_resources(resources: dict[str, float]) -> str:
    """``{"CPU": 4.0, "GPU": 1.0}`` -> ``"CPU 4, GPU 1"`` (Ray's own keys, sorted CPU first)."""
    order = sorted(resources, key=lambda k: (k not in ("CPU", "GPU"), k != "CPU", k))
    return ", ".join(f"{k} {resources[k]:g}" for k in order)


#: Frames of Ray's own ``ray.get``/``ray.wait`` (py-spy paths are relative to sys.path).
_RAY_WAIT_FUNCS = frozenset({"get", "wait", "get_objects", "wait_objects"})


def _ray_internal(file: str) -> bool:
    # py-spy shortens paths against sys.path: "ray/_private/worker.py", "hooks/ray_wait.py".
    return file.startswith("ray/") or "/ray/" in file or file.endswith("hooks/ray_wait.py")


def ray_get_site(stacks: list[ThreadStack]) -> str:
    """Where a thread of this process called ``ray.get``/``ray.wait``; "" if none is in one.

    The call site is the first frame outside Ray (and trainprobe's wrapper)
    above Ray's ``worker.py`` frames; the main thread wins a tie.
    """
    for thread in sorted(stacks, key=lambda t: not t.is_main):
        frames = thread.frames  # innermost first
        inside = [
            i
            for i, f in enumerate(frames)
            if f.file.endswith("ray/_private/worker.py") and f.function in _RAY_WAIT_FUNCS
        ]
        if not inside:
            continue
        for f in frames[inside[-1] + 1 :]:
            if not _ray_internal(f.file):
                return str(f)
    return ""
