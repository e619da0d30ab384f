"""What a report carries, as the core's plain data, and what of it a session keeps.

Built once per report, tens of thousands of times a second at a job-level
sidecar, so these classes are slotted and not frozen: about half the cost of
building a frozen dataclass. Treat them as immutable all the same; nothing
changes one after it is built (``dataclasses.replace`` makes a changed copy),
except :func:`trim_applied`, once the report is applied.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "KEPT_RECENT",
    "CollectiveData",
    "GpuMemoryData",
    "GroupSeqData",
    "PhaseData",
    "ReplicaProgressData",
    "ReportData",
    "SyncData",
    "sample_duration_ns",
    "trim_applied",
]


@dataclass(slots=True)
class ReplicaProgressData:
    """A report's torchft figures (see probe.proto ``ReplicaProgress``)."""

    quorum_id: int = -1
    step: int = 0
    participants: int = 0
    waiting: str = ""
    waiting_since_mono_ns: int = 0
    errored: bool = False


@dataclass(slots=True)
class PhaseData:
    name: str
    start_mono_ns: int
    timeout_s: float
    end_mono_ns: int = 0


@dataclass(slots=True)
class GpuMemoryData:
    device_index: int = 0
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    peak_allocated_bytes: int = 0
    has_nvml: bool = False
    device_used_bytes: int = 0
    device_total_bytes: int = 0
    process_used_bytes: int = 0
    device_uuid: str = ""

    @property
    def used_ratio(self) -> float | None:
        if not self.has_nvml or self.device_total_bytes <= 0:
            return None
        return self.device_used_bytes / self.device_total_bytes


@dataclass(slots=True)
class GroupSeqData:
    group: str
    issued: int
    completed: int
    oldest_inflight_start_mono_ns: int = 0
    inflight_op: str = ""
    inflight_seq: int = 0
    #: Issue times (worker clock) of collectives issued since the last report
    #: (lists as parsed, or tuples; never changed once built).
    started_seqs: Sequence[int] = ()
    started_mono_ns: Sequence[int] = ()


@dataclass(slots=True)
class CollectiveData:
    group: str
    seq: int
    op: str
    bytes: int
    start_mono_ns: int
    end_mono_ns: int
    step: int = 0


@dataclass(slots=True)
class SyncData:
    count: int = 0
    p50_s: float = 0.0
    max_s: float = 0.0
    bytes: int = 0
    sum_s: float = 0.0
    groups: tuple[GroupSeqData, ...] = ()
    samples: tuple[CollectiveData, ...] = ()


@dataclass(slots=True)
class ReportData:
    seq: int
    mono_ns: int
    wall_ns: int
    has_step: bool = False
    last_step: int = 0
    last_step_mono_ns: int = 0
    total_steps: int = 0
    step_count: int = 0
    step_sum_s: float = 0.0
    step_max_s: float = 0.0
    active_phases: tuple[PhaseData, ...] = ()
    finished_phases: tuple[PhaseData, ...] = ()
    dropped_reports: int = 0
    #: Tuples as parsed; once applied, arrays of the last few (:func:`trim_applied`).
    recent_steps: Sequence[int] = ()
    recent_step_end_mono_ns: Sequence[int] = ()
    recent_step_s: Sequence[float] = ()
    gpu: GpuMemoryData | None = None
    sync: SyncData | None = None
    replica: ReplicaProgressData | None = None


#: Per-step entries of an applied report that its session keeps (as
#: ``last_report``): the incident spans link the last 8 steps.
KEPT_RECENT = 16


def sample_duration_ns(c: CollectiveData) -> int:
    return c.end_mono_ns - c.start_mono_ns


def trim_applied(report: ReportData) -> None:
    """Drop the bulk of a report once it is applied and its listeners ran.

    The session keeps its last report for status, the rules and incident
    spans, none of which reads more than its last steps, its in-flight
    collectives and its slowest collective sample (the ``sync_latency``
    finding and the incident span's link name it). Kept whole, a hook's 256
    step times a report (and a client's 256 groups of 256 issue times) stayed
    in memory for every session until its next report; its 16 samples were
    ~4 KB a session.
    """
    if len(report.recent_steps) > 4 or len(report.recent_step_s) > 4:
        # As arrays: 16 entries are 128 bytes each way, where a tuple of number
        # objects was 540-680 (three of them, in every session).
        # They fit: the wire's fields are int64.
        report.recent_steps = array("q", report.recent_steps[-KEPT_RECENT:])
        report.recent_step_end_mono_ns = array("q", report.recent_step_end_mono_ns[-KEPT_RECENT:])
        report.recent_step_s = array("d", report.recent_step_s[-KEPT_RECENT:])
    if report.finished_phases:
        report.finished_phases = ()
    sync = report.sync
    if sync is not None:
        for g in sync.groups:
            if g.started_seqs or g.started_mono_ns:
                g.started_seqs = g.started_mono_ns = ()
        if len(sync.samples) > 1:
            sync.samples = (max(sync.samples, key=sample_duration_ns),)
