"""The sidecar's own pace: how late it is, so that its lateness ages nobody.

A sidecar that falls behind (a backlog of reports in gRPC and the kernel, a
loop starved of CPU, ticks far apart) reads every worker's reports late. The
rules already judge ages as of each worker's last *send* (rules.py), but that
shift is bounded per worker (by the heartbeat limit, so that no client's
clock hides its hang), and it says nothing of the reports still unread. On a
starved 2-core machine 2,000 workers at 10 Hz left the sidecar 11.7 s behind
its reports: every stepping worker looked stalled past the shift's bound.

So the sidecar measures its own lateness, from what it sees itself:

- tick lag: how much later than its interval a tick ran (our own clock);
- ingest lag *floor*: per second, the 10th percentile of every report's
  ingest lag (arrival minus send). When the sidecar is behind, every stream
  is, so the floor is its backlog; a single worker that is late or lies
  about its send times cannot raise it (it would need 90 % of the reports),
  and one that claims early sends can only lower it, back to today's rule.

Its lateness is the largest of these over the last :data:`PACE_WINDOW_S`
(bounded by :data:`MAX_ALLOWANCE_S`). From :data:`BEHIND_S` the sidecar is
*behind*: every verdict that is an age (heartbeat, stall, phases, start-up,
collectives in flight) is judged that much earlier (:meth:`Pace.allowance`,
``rules.evaluate(..., allowance_s)``), and a worker's shift to its send may
pass the heartbeat limit by as much (streams are not read alike: under load
some lag the others by seconds). A verdict the sidecar's own lateness would
make is *deferred* until the worker's silence outlasts it too, and a real
hang is still judged, that much later. Kernel evidence (a stopped or
vanished process, an ended stream) is no age and is never deferred. The
sidecar says it is behind (status, the ``trainprobe.ingest`` health service,
metrics) and counts what it deferred (:func:`defer`).

Pure: the servicer notes each report's lag and the engine each tick's, with
their clocks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass

from trainprobe.sidecar.core.session.model import Finding, Verdict, WorkerKey

__all__ = [
    "AGE_VERDICTS",
    "BEHIND_S",
    "FLOOR_QUANTILE",
    "LAG_BOUNDS",
    "MAX_ALLOWANCE_S",
    "PACE_WINDOW_S",
    "Pace",
    "PaceView",
    "defer",
]

#: Own lateness from which the sidecar says it is behind (and counts deferrals).
BEHIND_S = 0.5
#: How long a lateness counts after it was seen: one heartbeat's worth.
PACE_WINDOW_S = 10.0
#: The share of a second's reports at or below the floor.
FLOOR_QUANTILE = 0.1
#: The most the rules are held back by: a bound on what even a flood of
#: reports with old send times could defer.
MAX_ALLOWANCE_S = 60.0
#: Lower edges of the ingest-lag buckets (s): 50 ms, then +10 % each, to 93 s.
LAG_BOUNDS: tuple[float, ...] = (0.0, *(0.05 * 1.1**i for i in range(80)))


@dataclass(frozen=True)
class PaceView:
    """The sidecar's pace as status, health and metrics show it."""

    #: Lateness of BEHIND_S or more in the last window.
    behind: bool
    #: How much earlier the rules judge now (s): the sidecar's own lateness.
    own_lag_s: float
    #: Verdicts deferred: at the last check while behind, and since start.
    deferred_now: int
    deferred: int


class Pace:
    """The sidecar's own lateness over the last window (see the module's rule)."""

    def __init__(self, window_s: float = PACE_WINDOW_S) -> None:
        self.window_s = window_s
        self._slots = max(1, int(window_s))
        # Per one-second slot: its second, a lag histogram, its report count and
        # its largest tick lag; the floor of a slot is computed once it is full.
        self._second = [-1] * self._slots
        self._counts = [[0] * len(LAG_BOUNDS) for _ in range(self._slots)]
        self._n = [0] * self._slots
        self._tick = [0.0] * self._slots
        self._floor: list[float | None] = [None] * self._slots
        self.deferred = 0
        self.deferred_now = 0
        self._deferred_keys: frozenset[Hashable] = frozenset()

    def _slot(self, now: float) -> int:
        sec = int(now)
        i = sec % self._slots
        if self._second[i] != sec:
            self._second[i] = sec
            counts = self._counts[i]
            for b in range(len(counts)):
                counts[b] = 0
            self._n[i] = 0
            self._tick[i] = 0.0
            self._floor[i] = None
        return i

    def note_report(self, now: float, lag_s: float) -> None:
        """One report's ingest lag (arrival minus send, on our clock)."""
        # Once per report: the slot's reset only when its second changes.
        sec = int(now)
        i = sec % self._slots
        if self._second[i] != sec:
            i = self._slot(now)
        self._counts[i][bisect_right(LAG_BOUNDS, lag_s) - 1 if lag_s > 0 else 0] += 1
        self._n[i] += 1
        self._floor[i] = None

    def note_tick(self, now: float, gap_s: float, interval_s: float) -> None:
        """A tick ran ``gap_s`` after the previous one; it was due after ``interval_s``."""
        i = self._slot(now)
        late = gap_s - interval_s
        if late > self._tick[i]:
            self._tick[i] = late

    def _slot_floor(self, i: int) -> float:
        floor = self._floor[i]
        if floor is None:
            floor = 0.0
            n = self._n[i]
            if n:
                rank = max(1, int(n * FLOOR_QUANTILE))
                seen = 0
                for b, c in enumerate(self._counts[i]):
                    seen += c
                    if seen >= rank:
                        # The bucket's upper edge: overstated by 10 % at most,
                        # as understated lateness would be taken for a hang.
                        floor = LAG_BOUNDS[min(b + 1, len(LAG_BOUNDS) - 1)]
                        break
            self._floor[i] = floor
        return floor

    def own_lag(self, now: float) -> float:
        """The sidecar's lateness: the largest tick lag or ingest-lag floor of the
        last window (slots from the future, a clock that stepped back, are skipped)."""
        sec = int(now)
        worst = 0.0
        for i in range(self._slots):
            age = sec - self._second[i]
            if self._second[i] < 0 or age < 0 or age >= self.window_s:
                continue
            worst = max(worst, self._tick[i], self._slot_floor(i))
        return worst

    def allowance(self, now: float) -> float:
        """How much earlier than ``now`` the rules should judge."""
        return min(self.own_lag(now), MAX_ALLOWANCE_S)

    def note_deferred(self, keys: Collection[Hashable]) -> None:
        """The verdicts (worker, rule) that judging at ``now`` would give and the
        allowance defers; each counts once while it stays deferred."""
        keys = frozenset(keys)
        self.deferred += len(keys - self._deferred_keys)
        self._deferred_keys = keys
        self.deferred_now = len(keys)

    def view(self, now: float) -> PaceView:
        lag = self.own_lag(now)
        behind = lag >= BEHIND_S
        return PaceView(
            behind=behind,
            own_lag_s=min(lag, MAX_ALLOWANCE_S),
            deferred_now=self.deferred_now if behind else 0,
            deferred=self.deferred,
        )


#: Verdicts that are ages, which the sidecar's lateness can make.
AGE_VERDICTS = (Verdict.HUNG, Verdict.UNRESPONSIVE)


def defer(
    judged: Sequence[Finding],
    at_now: Sequence[Finding],
    standing: Mapping[WorkerKey, str],
) -> tuple[list[Finding], set[tuple[WorkerKey, str]]]:
    """Findings judged ``allowance`` earlier (``judged``), and those judged at now
    (``at_now``; all of them, or only the flagged workers'): the findings to act
    on, and the (worker, rule) verdicts deferred.

    ``standing``: the rule of each worker's verdict that stands (flagged). Judged
    at now it is kept: it was given before the sidecar fell behind, and a
    lateness that grew since must not end it (that would read as a hang that
    ended by itself). Any other finding the allowance holds back is deferred,
    except findings that are no age (an ended stream): those stand at once.
    """
    seen = {(f.key, f.rule) for f in judged}
    out = list(judged)
    deferred: set[tuple[WorkerKey, str]] = set()
    for f in at_now:
        k = (f.key, f.rule)
        if k in seen:
            continue
        if standing.get(f.key) == f.rule or f.verdict not in AGE_VERDICTS:
            out.append(f)
            seen.add(k)
        else:
            deferred.add(k)
    return out, deferred
