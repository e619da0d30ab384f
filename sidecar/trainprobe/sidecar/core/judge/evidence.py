"""Evidence the sidecar reads itself about a suspect rank, and what it means.

A report says what the worker *thinks*; a hung worker's last report is old
news and a worker's word is never proof. While a job has a suspect, the
sidecar samples each of its ranks from outside (``act/evidence.py``): the
kernel's view in ``/proc`` (state, CPU time, I/O counters) and the Python
stack, more than once. This module is the pure half: plain samples in, a
:class:`RankEvidence` out. Where the stack is comes from
:func:`~trainprobe.sidecar.core.judge.activity.classify_frames` (re-exported here).

A rank in ``backward`` whose CPU is idle is waiting for the gradient
allreduce: it counts as ``collective`` (:attr:`RankEvidence.waiting`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainprobe.sidecar.core.judge.activity import (
    ACTIVITIES,
    BACKWARD,
    COLLECTIVE,
    READING,
    USER,
    classify_frames,
)
from trainprobe.sidecar.core.judge.stackframes import Frame

__all__ = [
    "ACTIVITIES",
    "CPU_BUSY_RATIO",
    "ProcSample",
    "RankEvidence",
    "StackSample",
    "assess",
    "classify_frames",
    "definitive_reason",
    "stale_after_s",
]

#: Process states from /proc/<pid>/stat and what they are called here.
_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk",
    "T": "stopped",
    "t": "traced",
    "Z": "zombie",
    "X": "gone",
    "I": "sleeping",
}
#: CPU time over wall time above which a rank counts as busy (of one core).
#: The reporter thread of a blocked rank costs well under 1%.
CPU_BUSY_RATIO = 0.2


def stale_after_s(interval_ms: int) -> float:
    """How old a rank's last report may be and still describe it now: 2.5 report
    intervals (one in flight, one missed), at least 1 s. An older report is the
    past: the rank is analysed as unresponsive, not as where that report left it.

    ``interval_ms`` is how often the sidecar hears from the rank: its hook's
    interval, or its relaying node's batch interval when that is longer
    (:func:`~trainprobe.sidecar.core.session.model.heard_every_ms`)."""
    return max(1.0, 2.5 * interval_ms / 1000.0)


@dataclass(frozen=True)
class ProcSample:
    """One read of ``/proc/<pid>``: ``state`` is the kernel's letter, "" if gone."""

    at: float
    state: str
    #: utime + stime of every thread, in clock ticks.
    cpu_ticks: int = 0
    #: /proc/<pid>/io rchar and read_bytes (None where the file is unreadable).
    rchar: int | None = None
    read_bytes: int | None = None
    ticks_per_s: int = 100
    #: Frozen by a cgroup freezer (v2 ``cgroup.freeze``, v1 ``freezer.state``);
    #: None where no freezer could be asked.
    frozen: bool | None = None


@dataclass(frozen=True)
class StackSample:
    """The training thread's frames (innermost first) at one moment."""

    at: float
    frames: tuple[Frame, ...]
    where: str = ""
    method: str = ""


@dataclass(frozen=True)
class RankEvidence:
    """What the sidecar saw of one rank; None fields were not observable."""

    rank: int
    #: running, sleeping, disk, stopped, traced, exiting, zombie, gone; "" = unknown.
    state: str = ""
    cpu_ratio: float | None = None
    io_moving: bool | None = None
    #: Whether the last two stack samples had the same frames.
    stack_same: bool | None = None
    activity: str = ""
    where: str = ""
    reporter_alive: bool = True
    samples: int = 0
    #: Frozen by a cgroup freezer in the last sample (None: no freezer to ask).
    frozen: bool | None = None
    #: The session is of an earlier attempt: it was last heard before every live
    #: session of its job began (``summary.previous_attempt``). Its process is not
    #: the rank the job waits for now, whatever the kernel says of it.
    superseded: bool = False

    @property
    def held(self) -> bool:
        """Paused from outside: stopped (SIGSTOP), stopped by a tracer, or frozen
        by a cgroup freezer. Nothing in it runs until someone resumes it."""
        return bool(self.frozen) or self.state in ("stopped", "traced")

    @property
    def cpu_busy(self) -> bool | None:
        return None if self.cpu_ratio is None else self.cpu_ratio >= CPU_BUSY_RATIO

    @property
    def waiting(self) -> bool:
        """Blocked in a collective: waits for a peer, is never the cause.

        A stopped or vanished process waits for nothing, whatever its stack says.
        """
        if self.frozen or self.state in ("stopped", "traced", "exiting", "zombie", "gone"):
            return False
        if self.activity == COLLECTIVE:
            return True
        return self.activity == BACKWARD and self.cpu_busy is False

    @property
    def label(self) -> str:
        """What the rank is doing, in a word: ``reading``, ``stopped``..."""
        if self.superseded:
            return f"a process of an earlier attempt ({self.state or 'unknown'})"
        if self.frozen:
            return "frozen (cgroup freezer)"
        if self.state in ("stopped", "traced", "exiting", "zombie", "gone", "disk"):
            return {"disk": "uninterruptible I/O"}.get(self.state, self.state)
        if self.waiting:
            return "waiting in a collective"
        if self.cpu_busy and self.activity in (USER, BACKWARD):
            return "busy"
        return self.activity.replace("_", " ") if self.activity else "unknown"

    def to_record(self) -> dict[str, object]:
        return {
            "state": self.state or "unknown",
            "cpu_ratio": None if self.cpu_ratio is None else round(self.cpu_ratio, 3),
            "io_moving": self.io_moving,
            "stack_same": self.stack_same,
            "activity": self.activity,
            "label": self.label,
            "where": self.where,
            "reporter_alive": self.reporter_alive,
            "samples": self.samples,
            "frozen": self.frozen,
            **({"superseded": True} if self.superseded else {}),
        }


def assess(
    rank: int,
    procs: Sequence[ProcSample],
    stacks: Sequence[StackSample],
    reporter_alive: bool,
) -> RankEvidence:
    """Combine one rank's samples, oldest first, into evidence."""
    state, cpu, io = "", None, None
    if procs:
        last = procs[-1]
        state = _STATES.get(last.state, "gone" if not last.state else "running")
        if state == "zombie" and (len(procs) < 2 or procs[-2].state not in ("Z", "")):
            # The leader of a process whose threads are still being torn down reads
            # Z for a moment; a zombie is one that reads Z twice (then definitive).
            state = "exiting"
        first = procs[0]
        dt = last.at - first.at
        if len(procs) >= 2 and dt > 0 and last.state and first.state:
            cpu = max(0, last.cpu_ticks - first.cpu_ticks) / last.ticks_per_s / dt
            if last.rchar is not None and first.rchar is not None:
                io = last.rchar > first.rchar or (last.read_bytes or 0) > (first.read_bytes or 0)
    same = None
    activity, where = "", ""
    if stacks:
        top = stacks[-1]
        activity = classify_frames(top.frames) if top.frames else ""
        where = top.where
        if len(stacks) >= 2 and stacks[-2].frames and top.frames:
            same = stacks[-2].frames == top.frames
    if state == "disk" and activity in ("", USER):
        activity = READING
    return RankEvidence(
        rank=rank,
        state=state,
        cpu_ratio=cpu,
        io_moving=io,
        stack_same=same,
        activity=activity,
        where=where,
        reporter_alive=reporter_alive,
        samples=max(len(procs), len(stacks)),
        frozen=procs[-1].frozen if procs and procs[-1].state else None,
    )


def definitive_reason(ev: RankEvidence) -> str:
    """Why the kernel's word alone proves ``ev``'s rank cannot resume; "" if it does not.

    - ``stopped`` (SIGSTOP, state T): nothing in the process runs until someone
      sends SIGCONT; a rank stopped while its peers wait holds the job.
    - ``zombie`` / ``gone``: the process is over; its peers can never complete
      a collective with it.

    A tracer's stop (state ``t``: a debugger attached) is not: a person may be
    looking at it. Uninterruptible I/O (state D), a lock wait, a busy CPU and
    a silent reporter are not either: each also happens in a healthy job
    (a slow NFS read, a lock held across slow I/O, a long C call).

    Nor is the word on a process of an earlier attempt (``superseded``): after
    a restart its rank's new process may not have connected yet (a hang
    before its hook), and the old one being gone says nothing of it.
    """
    if ev.superseded:
        return ""
    if ev.state == "stopped":
        return "stopped"
    if ev.state in ("zombie", "gone"):
        return ev.state
    return ""
