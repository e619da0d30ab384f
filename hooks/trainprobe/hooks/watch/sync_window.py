"""What one report says of the collectives: the window and its message.

A window is what the reporter thread drained from every group's ledger
since the previous report (``sync.py``): the latencies of the collectives
that finished, each group's issued and completed counters with its oldest
collective still in flight, the issue times the sidecar compares across
ranks, and the slowest finished collectives one by one. These are plain
values, built on the reporter thread and turned into the report's
``SyncStats`` there; the training thread never touches them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from trainprobe.proto import probe_pb2

__all__ = ["FinishedOp", "GroupCounters", "SyncWindow", "sync_stats_pb"]


@dataclass(frozen=True)
class GroupCounters:
    """Issued/completed counters of one group and its oldest in-flight collective."""

    name: str
    issued: int
    completed: int
    oldest_start_ns: int = 0
    oldest_op: str = ""
    oldest_seq: int = 0
    #: (seq, issue time) of the collectives issued since the previous window.
    started: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class FinishedOp:
    group: str
    seq: int
    op: str
    nbytes: int
    start_ns: int
    duration_s: float
    step: int


@dataclass
class SyncWindow:
    """Collectives finished since the previous window, and every group's counters."""

    durations_s: list[float] = field(default_factory=list)
    nbytes: int = 0
    groups: list[GroupCounters] = field(default_factory=list)
    samples: list[FinishedOp] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.durations_s)

    @property
    def p50_s(self) -> float:
        return statistics.median(self.durations_s) if self.durations_s else 0.0

    @property
    def max_s(self) -> float:
        return max(self.durations_s, default=0.0)

    @property
    def sum_s(self) -> float:
        return sum(self.durations_s)


def sync_stats_pb(window: SyncWindow) -> probe_pb2.SyncStats:
    """The report message for one window."""
    return probe_pb2.SyncStats(
        count=window.count,
        p50_s=window.p50_s,
        max_s=window.max_s,
        bytes=window.nbytes,
        sum_s=window.sum_s,
        groups=[
            probe_pb2.GroupSeq(
                group=g.name,
                issued=g.issued,
                completed=g.completed,
                oldest_inflight_start_mono_ns=g.oldest_start_ns,
                inflight_op=g.oldest_op,
                inflight_seq=g.oldest_seq,
                started_seqs=[seq for seq, _ in g.started],
                started_mono_ns=[ns for _, ns in g.started],
            )
            for g in window.groups
        ],
        samples=[
            probe_pb2.CollectiveSample(
                group=f.group,
                seq=f.seq,
                op=f.op,
                bytes=f.nbytes,
                start_mono_ns=f.start_ns,
                end_mono_ns=f.start_ns + int(f.duration_s * 1e9),
                step=f.step,
            )
            for f in window.samples
        ],
    )
