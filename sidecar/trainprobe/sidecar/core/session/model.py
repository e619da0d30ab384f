"""Plain data the rules work on: what a worker said, and what we know of it.

Times named ``*_at`` are seconds on the sidecar's monotonic clock; times named
``*_mono_ns`` are the worker's own clock, as received. :class:`WorkerState`
maps the second onto the first (see :meth:`WorkerState.to_local`).

What a report carries (:class:`ReportData` and its parts) is in
:mod:`.report`, and who the worker is (its Hello, and what the kernel said of
it) in :mod:`.hello`; their names are importable from here too.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from trainprobe.sidecar.core.ring import FloatRing
from trainprobe.sidecar.core.session.hello import (
    HelloData,
    RayIds,
    ReplicaIdentityData,
    VerifiedProcess,
    WorkerKey,
)
from trainprobe.sidecar.core.session.report import (
    KEPT_RECENT,
    CollectiveData,
    GpuMemoryData,
    GroupSeqData,
    PhaseData,
    ReplicaProgressData,
    ReportData,
    SyncData,
    sample_duration_ns,
    trim_applied,
)
from trainprobe.sidecar.core.session.thresholds import StepWindow

#: The rule whose flagged ranks are the waiting ones (a collective in flight
#: too long): their verdict clears when a report says the sync finished.
WAITING_RULE = "sync_inflight"

__all__ = [
    "GPU_RATIO_WINDOW",
    "KEPT_RECENT",
    "OFFSET_RISE_PER_S",
    "OFFSET_WINDOW",
    "STEP_SAMPLE_WINDOW",
    "WAITING_RULE",
    "ActivePhase",
    "CollectiveData",
    "Finding",
    "GpuMemoryData",
    "GroupSeqData",
    "HelloData",
    "PhaseData",
    "RayIds",
    "ReplicaIdentityData",
    "ReplicaProgressData",
    "ReportData",
    "SyncData",
    "Verdict",
    "VerifiedProcess",
    "WorkerKey",
    "WorkerState",
    "heard_every_ms",
    "sample_duration_ns",
    "trim_applied",
]


class Verdict(str, enum.Enum):
    OK = "OK"
    DEGRADED = "DEGRADED"
    UNRESPONSIVE = "UNRESPONSIVE"
    HUNG = "HUNG"
    DEAD = "DEAD"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {
    Verdict.OK: 0,
    Verdict.DEGRADED: 1,
    Verdict.UNRESPONSIVE: 2,
    Verdict.HUNG: 3,
    Verdict.DEAD: 4,
}


@dataclass(slots=True)
class ActivePhase:
    name: str
    started_at: float
    timeout_s: float


#: Reports kept for the clock-offset estimate and the step rate.
OFFSET_WINDOW = 16
#: How fast the clock-offset estimate may rise (s/s): 1,000 ppm, ten times
#: the drift of a poor crystal.
OFFSET_RISE_PER_S = 1e-3
#: NVML samples kept for the gpu_memory rule.
GPU_RATIO_WINDOW = 64
#: Step durations kept for threshold calibration.
STEP_SAMPLE_WINDOW = 1000


@dataclass(slots=True)
class WorkerState:
    """Everything the sidecar knows about one worker session."""

    hello: HelloData
    first_seen_at: float
    connected: bool = True
    #: Bumped when the same process opens a new stream; stale closes are ignored.
    generation: int = 0
    #: Whether the kernel vouched for the Hello's pid (an identity ticket the
    #: sidecar issued to that pid, or a relaying node that did so), with the
    #: process's uid and start time, which guards against pid reuse.
    verified: bool = False
    uid: int = -1
    proc_start_ticks: int | None = None
    #: Whether this sidecar may signal the process and read it from outside:
    #: verified here, on a direct stream. Unverified workers are still judged;
    #: their kill is an Abort command over their own stream.
    local: bool = False
    #: How far a verified worker's CLOCK_MONOTONIC runs ahead of this sidecar's,
    #: as the kernel says (0 but in another time namespace): a local worker's
    #: timestamps map exactly by it, not by the report-delay estimate.
    mono_ahead_s: float = 0.0
    #: The relay route when the session came over a node sidecar's Relay stream
    #: (its node signals the process); None for a direct Connect stream.
    relay: Any = None
    #: The Relay stream that vouched for this session and owns its rank (None: a
    #: direct stream, or unvouched): no other stream may take or resume it.
    node: Any = None
    #: The relaying node's batch interval (0: not relayed, or a node that does not
    #: say): this sidecar hears from the worker this often at best.
    relay_interval_ms: int = 0
    #: The owning node's word that the kernel holds the process (how, when read
    #: on this sidecar's clock; None: not held, or not said): ``core/hang/held.py``.
    held: tuple[str, float] | None = None
    #: "", "goodbye", "vanished" or "rejected".
    ended: str = ""
    ended_at: float = 0.0
    pid_alive_at_end: bool | None = None
    last_report_at: float = 0.0
    #: The last report's send time, mapped onto the sidecar's clock, and how
    #: long it took to reach the rules (``last_report_at - last_sent_at``):
    #: when the sidecar lags, ages are judged as of the send, not the arrival.
    last_sent_at: float = 0.0
    ingest_lag_s: float = 0.0
    #: Set (to the sidecar time its loop resumed) after the sidecar's own loop
    #: froze: no clock-based verdict until a report sent after it arrives.
    fresh_after: float = 0.0
    last_report: ReportData | None = None
    reports: int = 0
    has_step: bool = False
    last_step: int = 0
    last_step_at: float = 0.0
    total_steps: int = 0
    last_phase_end_at: float = 0.0
    active_phases: list[ActivePhase] = field(default_factory=list)
    step_samples: StepWindow = field(default_factory=lambda: StepWindow(STEP_SAMPLE_WINDOW))
    #: (received_at, total_steps) of recent reports, for the step rate.
    rate_points: FloatRing = field(default_factory=lambda: FloatRing(OFFSET_WINDOW, 2))
    #: (receipt - send) of recent reports; see ``core.session.fold.note_offset``.
    offsets: FloatRing = field(default_factory=lambda: FloatRing(OFFSET_WINDOW))
    #: The worker's clock offset: the smallest of ``offsets`` (0 before any
    #: report), which it follows down at once and up slowly (``core.session.fold.note_offset``).
    offset_s: float = 0.0
    #: The smallest of ``offsets``, and when ``offset_s`` was last moved.
    offset_min_s: float = 0.0
    offset_at: float = 0.0
    #: Device memory used/total of recent NVML samples, newest last (an empty
    #: tuple until the first: most sessions never have one).
    gpu_ratios: deque[float] | tuple[float, ...] = ()
    #: The latest GPU figures: the allocator's from the last report that had
    #: any, NVML's from the last report that carried a sample.
    gpu: GpuMemoryData | None = None
    #: The last report window in which collectives finished.
    sync_window: SyncData | None = None
    #: (group, seq) of the collectives it was seen waiting in (its verdict was
    #: ``sync_inflight``) when a report said they finished: their long sync was
    #: that wait, judged with the job's hang, not a slow sync of its own.
    waited_sync: tuple[tuple[str, int], ...] = ()
    verdict: Verdict = Verdict.OK
    verdict_rule: str = ""
    #: Set when trainprobe itself killed the process: its exit is expected.
    killed_by_us: bool = False
    #: The decision rule (stopped, patience, job_kill_grace...) and incident of that kill.
    killed_rule: str = ""
    killed_incident: str = ""
    #: Ended by an eviction of its replica group (replicated jobs): the job went on.
    evicted: bool = False
    #: Sidecar time of the oldest in-flight collective per group, mapped.
    inflight_since: dict[str, float] = field(default_factory=dict)
    #: How late it entered shared collectives (an ``arrival.LagStats``), once known.
    arrival: Any = None
    #: Calibration cache: p99 of step_samples, refreshed on each report.
    step_p99_s: float | None = None
    #: ``hello.key``, which a resumed session's new Hello keeps (same job and rank).
    key: WorkerKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.key = self.hello.key

    def to_local(self, worker_mono_ns: int) -> float:
        """Map a worker monotonic timestamp onto the sidecar's clock (seconds)."""
        return worker_mono_ns / 1e9 + self.offset_s

    @property
    def steps_per_s(self) -> float:
        if len(self.rate_points) < 2:
            return 0.0
        (t0, s0), (t1, s1) = self.rate_points[0], self.rate_points[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    @property
    def gpu_uuid(self) -> str:
        """The worker's GPU: from Hello, else from its memory reports."""
        return self.hello.gpu_uuid or (self.gpu.device_uuid if self.gpu else "")

    @property
    def phase_names(self) -> str:
        return ",".join(p.name for p in self.active_phases)

    def oldest_inflight(self) -> tuple[str, float] | None:
        """(group, since) of the oldest collective in flight, if any."""
        if not self.inflight_since:
            return None
        group = min(self.inflight_since, key=self.inflight_since.__getitem__)
        return group, self.inflight_since[group]


@dataclass(frozen=True)
class Finding:
    """One rule firing for one worker."""

    key: WorkerKey
    rule: str
    verdict: Verdict
    evidence: dict[str, object]
    pid: int = 0


def heard_every_ms(w: WorkerState) -> int:
    """How often this sidecar hears from ``w`` at best: its hook's report interval,
    or the batch interval of the node that relays it, whichever is longer."""
    return max(w.hello.interval_ms, w.relay_interval_ms)
