"""Who a worker is: what its Hello said, and what the kernel said of it.

A session is keyed by :class:`WorkerKey` (job, rank) and opened from a
:class:`HelloData`, which holds only the client's own word: any of it may be
false, so nothing here makes a process ours to signal. That takes a
:class:`VerifiedProcess`, the pid, uid and start time the kernel named for
the connection (SO_PEERCRED, through an identity ticket, here or on the
relay node that vouched for it), handed to the registry beside the Hello.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from trainprobe.sidecar.core.conventions import RayIds

__all__ = ["HelloData", "RayIds", "ReplicaIdentityData", "VerifiedProcess", "WorkerKey"]


class WorkerKey(NamedTuple):
    """A session's identity. A named tuple: hashed in C on every registry lookup."""

    job_id: str
    rank: int

    def __str__(self) -> str:
        return f"{self.job_id}/rank{self.rank}"


@dataclass(frozen=True)
class ReplicaIdentityData:
    """The replica group of a replicated (torchft) job a process trains in."""

    replica_id: str
    group_rank: int = 0
    group_world_size: int = 1


@dataclass(frozen=True)
class HelloData:
    protocol_version: int
    hook_version: str
    job_id: str
    rank: int
    local_rank: int
    world_size: int
    host: str
    pid: int
    interval_ms: int = 1000
    ray: RayIds = field(default_factory=RayIds)
    gpu_uuid: str = ""
    cuda_device: int = -1
    labels: dict[str, str] = field(default_factory=dict)
    #: faulthandler's signal and output file in the worker (0 / "": not armed).
    stack_signal: int = 0
    stack_file: str = ""
    #: The training thread: Python ident and OS thread id (0: unknown).
    thread_id: int = 0
    thread_native_id: int = 0
    #: What resumes an unverified session (see Registry.open); never shown.
    session_secret: bytes = field(default=b"", repr=False)
    #: Set for a rank of a replicated (torchft) job.
    replica: ReplicaIdentityData | None = None
    #: The job's human name (empty from older hooks); job_id stays the key.
    job_name: str = ""
    #: A start-up hook's session, kept until a framework callback's hook takes
    #: over: it may never step, so rule ``startup`` (no evidence) spares it.
    startup_watch: bool = False
    #: (job_id, rank), built once: the report path asks for it on every report.
    key: WorkerKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", WorkerKey(self.job_id, self.rank))


@dataclass(frozen=True)
class VerifiedProcess:
    """A process the kernel named (SO_PEERCRED): its pid in this sidecar's PID
    namespace, its uid, and its start time, which pins the pid against reuse;
    and how far its CLOCK_MONOTONIC runs ahead of this sidecar's (another time
    namespace: ``unshare --time``, a container restored by CRIU)."""

    pid: int
    uid: int
    start_ticks: int | None
    mono_ahead_ns: int = 0
