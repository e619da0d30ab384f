"""Arrival lag: how late each rank entered the collectives it shared.

Every rank numbers its collectives per group alike (the hook's ``GroupLedger``),
so (job, group, seq) names one collective on all of them, and the issue time
each rank reports for it, mapped onto the sidecar's clock with that rank's
offset, says who entered first and how late the others were. A persistent
straggler is a rank whose lag stays high; a rank about to hang is one whose
lag grows, then one that stops arriving at all.

A comparison stays open until every rank seen in the group has reported the
collective (two at least), or until ``close_after_s`` has passed. Then each
arrived rank's lag (its issue time minus the earliest) goes into its
:class:`LagStats`; a rank of the group that had not yet issued the collective
is counted *missed*, with the time it has kept the first rank waiting so far
(up to its own last report) as a lower bound.

Cost per report: one dict lookup and insert per issue time compared; a group
that issues many collectives per report is thinned to every ``stride``-th seq
(the same on every rank), about :data:`COMPARED_PER_REPORT` per report. A
comparison is closed once, in O(ranks), without a call per rank; expired
ones are swept oldest first. Each rank's lags are folded per report window
into its worst one, so exporting costs one histogram record per report, not
one per collective. Memory: at most :data:`MAX_OPEN` open comparisons per
group and :data:`MAX_GROUPS_PER_JOB` groups per job. What each rank keeps of
its lags is ``lag_stats.py``.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from trainprobe.sidecar.core.session.lag_stats import BLOCKED_S, LagStats, LagSummary, note_waits
from trainprobe.sidecar.core.session.model import (
    GroupSeqData,
    SyncData,
    WorkerState,
    heard_every_ms,
)

__all__ = [
    "BLOCKED_S",
    "CLOSE_AFTER_S",
    "COMPARED_PER_REPORT",
    "MAX_GROUPS_PER_JOB",
    "MAX_OPEN",
    "MAX_PENDING_LAGS",
    "STARTS_PER_REPORT",
    "ArrivalTracker",
    "LagStats",
    "LagSummary",
]

#: How long a comparison waits for the ranks that have not reported it, at
#: least; three report intervals of the slowest-reporting rank when longer.
CLOSE_AFTER_S = 3.0
#: Open comparisons per group; the oldest closes early beyond it.
MAX_OPEN = 256
#: Groups tracked per job; a job's further groups are not compared.
MAX_GROUPS_PER_JOB = 64
#: Issue times of one group and report that are compared (the newest).
STARTS_PER_REPORT = 64
#: Comparisons per report a busy group is thinned to (see :func:`_stride`).
COMPARED_PER_REPORT = 2
#: Lags waiting for an exporter; the oldest are dropped when none reads them.
MAX_PENDING_LAGS = 65536


class _Open:
    """One collective being compared: rank -> issue time on the sidecar's clock."""

    __slots__ = ("arrivals", "opened_at")

    def __init__(self, opened_at: float) -> None:
        self.opened_at = opened_at
        self.arrivals: dict[int, float] = {}


class _Group:
    __slots__ = ("close_after_s", "floor", "issued", "members", "name", "open", "rate", "stride")

    def __init__(self, name: str, close_after_s: float) -> None:
        self.name = name
        #: Issue times per report (a moving average), and 1 in how many is compared.
        self.rate = 0.0
        self.stride = 1
        self.close_after_s = close_after_s
        # Insertion order is opening order, so expiry pops from the front.
        self.open: OrderedDict[int, _Open] = OrderedDict()
        #: Ranks that reported issue times in this group, and their sessions.
        self.members: dict[int, WorkerState] = {}
        #: Each member's issued counter, from its latest report.
        self.issued: dict[int, int] = {}
        #: The highest seq closed: a lone late report of it opens nothing.
        self.floor = 0


def _stride(grp: _Group, n: int) -> int:
    """Compare every ``stride``-th collective of the group (a power of two).

    Every rank skips the same seqs, so a busy group (a DDP step of tens of
    buckets) costs about :data:`COMPARED_PER_REPORT` comparisons per report.
    """
    grp.rate += (n - grp.rate) * 0.1
    per = grp.rate / grp.stride
    if per > 2 * COMPARED_PER_REPORT:
        grp.stride *= 2
    elif per < COMPARED_PER_REPORT / 2 and grp.stride > 1:
        grp.stride //= 2
    return grp.stride


def _compared(seqs: Sequence[int], stride: int) -> range | list[int]:
    """Indices of the seqs that are multiples of ``stride``, the newest at most."""
    n = len(seqs)
    if stride == 1:
        return range(max(0, n - STARTS_PER_REPORT), n)
    if seqs[-1] - seqs[0] == n - 1:  # consecutive, as the hook sends them
        return range(-seqs[0] % stride, n, stride)
    return [i for i in range(n) if not seqs[i] % stride][-STARTS_PER_REPORT:]


class ArrivalTracker:
    """Open comparisons of every job's groups; lags go to each rank's LagStats."""

    def __init__(
        self,
        attach: Callable[[WorkerState], LagStats],
        close_after_s: float = CLOSE_AFTER_S,
        max_open: int = MAX_OPEN,
    ) -> None:
        #: Gives a session its LagStats at its first comparison (the registry's:
        #: it alone writes sessions).
        self.attach = attach
        self.close_after_s = close_after_s
        self.max_open = max_open
        self._groups: dict[tuple[str, str], _Group] = {}
        self._per_job: dict[str, int] = {}
        #: (worker, group, lag_s, missed) as comparisons close, for exporters.
        self.lags: deque[tuple[WorkerState, str, float, bool]] = deque(maxlen=MAX_PENDING_LAGS)

    def __len__(self) -> int:
        return sum(len(g.open) for g in self._groups.values())

    def observe(self, state: WorkerState, sync: SyncData, now: float) -> None:
        """Fold one report's issue times in (after the registry mapped its clock)."""
        hello = state.hello
        rank, job = hello.rank, hello.job_id
        offset = state.offset_s
        stats = state.arrival
        if stats is not None and stats.win_n:
            # Lags found since this rank's previous report: the window closes
            # and its worst goes out (inline: this runs for every report).
            worst = stats.win_max
            self.lags.append((state, stats.group, worst, stats.win_missed))
            stats.count += stats.win_n
            stats.recent.append(worst)
            stats.win_max, stats.win_n, stats.win_missed = 0.0, 0, False
        for g in sync.groups:
            grp = self._groups.get((job, g.group))
            seqs = g.started_seqs
            if not seqs:
                if grp is not None and rank in grp.issued:
                    grp.issued[rank] = g.issued
                    self._blocked(grp, g, offset, rank, len(grp.members), now)
                continue
            if grp is None and (grp := self._new_group(job, g.group)) is None:
                continue
            opened = grp.open
            grp.members[rank] = state
            grp.issued[rank] = g.issued
            wait = 3.0 * heard_every_ms(state) / 1000.0
            if wait > grp.close_after_s:
                grp.close_after_s = wait
            starts = g.started_mono_ns
            ranks = len(grp.members)
            stride = _stride(grp, len(seqs))
            for i in _compared(seqs, stride):
                self._arrive(grp, seqs[i], starts[i] / 1e9 + offset, rank, ranks, now)
            self._blocked(grp, g, offset, rank, ranks, now)
            while len(opened) > self.max_open:
                seq, entry = opened.popitem(last=False)
                self._close(grp, seq, entry, timed_out=True)
        # Expired comparisons close in sweep(), every tick: not on this path,
        # which runs for every report.

    def _arrive(self, grp: _Group, seq: int, at: float, rank: int, ranks: int, now: float) -> None:
        opened = grp.open
        entry = opened.get(seq)
        if entry is None:
            if seq <= grp.floor:
                return
            entry = opened[seq] = _Open(now)
        entry.arrivals[rank] = at
        if len(entry.arrivals) == ranks and ranks >= 2:
            del opened[seq]
            self._close(grp, seq, entry, timed_out=False)

    def _blocked(
        self, grp: _Group, g: GroupSeqData, offset: float, rank: int, ranks: int, now: float
    ) -> None:
        """A rank waiting in a collective for long is compared on it, whatever the stride.

        A thinned group skips most seqs; if a rank never enters a skipped one,
        its waiting peers' reports name it as their oldest in flight, so the
        comparison opens anyway and the absent rank is counted missed.
        """
        seq, start_ns = g.inflight_seq, g.oldest_inflight_start_mono_ns
        if not seq or not start_ns or seq % grp.stride == 0:
            return
        at = start_ns / 1e9 + offset
        if now - at >= BLOCKED_S:
            self._arrive(grp, seq, at, rank, ranks, now)

    def sweep(self, now: float) -> None:
        """Close expired comparisons and forget groups whose ranks all left.

        Run every tick: a hung job reports no new issue times, and its open
        comparison must still close to show who kept the others waiting.
        """
        gone = []
        for key, grp in self._groups.items():
            self._expire(grp, now)
            if not grp.open and not any(w.connected for w in grp.members.values()):
                gone.append(key)
        for key in gone:
            del self._groups[key]
            left = self._per_job[key[0]] - 1
            if left:
                self._per_job[key[0]] = left
            else:
                del self._per_job[key[0]]

    def _new_group(self, job: str, name: str) -> _Group | None:
        n = self._per_job.get(job, 0)
        if n >= MAX_GROUPS_PER_JOB:
            return None
        self._per_job[job] = n + 1
        grp = self._groups[(job, name)] = _Group(name, self.close_after_s)
        return grp

    def _expire(self, grp: _Group, now: float) -> None:
        opened = grp.open
        deadline = now - grp.close_after_s
        while opened:
            seq, entry = next(iter(opened.items()))
            if entry.opened_at > deadline:
                return
            del opened[seq]
            self._close(grp, seq, entry, timed_out=True)

    def _close(self, grp: _Group, seq: int, entry: _Open, timed_out: bool) -> None:
        if seq > grp.floor:
            grp.floor = seq
        arrivals = entry.arrivals
        members = grp.members
        name = grp.name
        attach = self.attach
        first = min(arrivals.values())
        missing = timed_out and any(
            rank not in arrivals and grp.issued.get(rank, 0) < seq and w.connected
            for rank, w in members.items()
        )
        last = math.inf if missing else max(arrivals.values())
        if last - first >= BLOCKED_S:
            note_waits(members, arrivals, name, seq, last, attach)
        if len(arrivals) >= 2:
            # The hot loop (every rank of every collective): no call per rank.
            for rank, at in arrivals.items():
                w = members.get(rank)
                if w is None:
                    continue
                stats = w.arrival
                if stats is None:
                    stats = attach(w)
                lag = at - first
                if lag > stats.win_max:
                    stats.win_max = lag
                stats.win_n += 1
                stats.group = name
        if not timed_out:
            return
        for rank, w in members.items():
            if rank in arrivals or grp.issued.get(rank, 0) >= seq or not w.connected:
                continue
            # Not issued as of its last report: it has kept the first rank
            # waiting at least this long (a lower bound; it may never come).
            waited = w.last_report_at - first
            if waited <= 0:
                continue
            stats = w.arrival
            if stats is None:
                stats = attach(w)
            stats.win_max = max(stats.win_max, waited)
            stats.win_n += 1
            stats.win_missed = True
            stats.missed += 1
            stats.group = name
