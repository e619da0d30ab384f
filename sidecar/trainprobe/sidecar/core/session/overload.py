"""Load shedding: what the sidecar does with reports it cannot apply in time.

The rule. A report that reaches the registry more than ``late_after_s`` after
it was sent (its ingest lag: arrival minus its send time, mapped onto the
sidecar's clock) is *late*, where ``late_after_s`` is the larger of
:data:`SHED_LAG_S` and two of the worker's report intervals. A hook sends a
report every interval, so by then at least one newer report from the same
worker is already queued behind a late one: for liveness the late one is
superseded. It is applied for liveness only (clock offset, arrival, steps,
phases, in-flight collectives: everything a verdict reads) and its sampled
parts are dropped: its step times (calibration), arrival-lag issue times,
sync latencies, GPU samples and the report listeners (telemetry). Those cost
most of a report's work and none of them can make or clear a verdict, so the
sidecar catches up with its backlog instead of growing it, and the newest
report still lands in full as soon as it is on time again.

Nothing else changes: ages are still judged as of each report's send
(rules.py), so the backlog itself ages nobody, and an incident's
``detection_latency_s`` counts from the onset the reports show.

Pure: the servicer calls :meth:`Shedder.is_late` and :meth:`Shedder.note`
with its clock; status, the health service and the metrics read
:meth:`Shedder.load`, which also says whether the sidecar is behind and what
it deferred (its :class:`~trainprobe.sidecar.core.session.pace.Pace`, when given).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainprobe.sidecar.core.session.pace import Pace

__all__ = ["SHED_LAG_S", "IngestLoad", "Shedder"]

#: Ingest lag beyond which a report is late (and two intervals at least).
SHED_LAG_S = 1.0
#: How long the sidecar still says it is overloaded after its last late report,
#: and the window of the lag it reports.
LOAD_WINDOW_S = 10.0


@dataclass(frozen=True)
class IngestLoad:
    """The sidecar's own load, as status, health and metrics show it."""

    #: A report was shed in the last :data:`LOAD_WINDOW_S`.
    overloaded: bool
    applied: int
    shed: int
    #: The largest ingest lag of a report over the last window or two.
    max_lag_s: float
    #: Reports shed per second over the last window or two.
    shed_per_s: float
    #: The sidecar is behind its reports (core/session/pace.py): its own lateness, by
    #: which the rules judge earlier, and the verdicts that deferred (now, and
    #: distinct ones since start).
    behind: bool = False
    own_lag_s: float = 0.0
    deferred_now: int = 0
    deferred: int = 0


class Shedder:
    """Decides which reports are late, and keeps count (see the module's rule)."""

    def __init__(self, late_after_s: float = SHED_LAG_S, window_s: float = LOAD_WINDOW_S) -> None:
        self.late_after_s = late_after_s
        self.window_s = window_s
        self.applied = 0
        self.shed = 0
        self.last_shed_at: float | None = None
        # Two windows (the current one and the one before) of (max lag, shed):
        # a bounded, O(1) picture of the last window_s or so.
        self._win_start = 0.0
        self._cur = [0.0, 0]
        self._prev = [0.0, 0]
        #: The sidecar's pace, which load() reports too (the engine's).
        self.pace: Pace | None = None

    def late_after(self, interval_s: float) -> float:
        return max(self.late_after_s, 2.0 * interval_s)

    def is_late(self, lag_s: float, interval_s: float) -> bool:
        """Whether a report that took ``lag_s`` to arrive is superseded."""
        return lag_s > self.late_after(interval_s)

    def note(self, now: float, lag_s: float, shed: bool) -> None:
        """Count one report: applied in full, or shed."""
        self._roll(now)
        cur = self._cur
        if lag_s > cur[0]:
            cur[0] = lag_s
        if shed:
            self.shed += 1
            cur[1] += 1
            self.last_shed_at = now
        else:
            self.applied += 1

    def _roll(self, now: float) -> None:
        if now - self._win_start < self.window_s:
            return
        if now - self._win_start < 2 * self.window_s:
            self._prev = self._cur
        else:  # a quiet spell: nothing from the last window either
            self._prev = [0.0, 0]
        self._cur = [0.0, 0]
        self._win_start = now

    def load(self, now: float) -> IngestLoad:
        self._roll(now)
        span = max(now - self._win_start + (self.window_s if self._prev[1] else 0.0), 1e-9)
        shed_recent = self._cur[1] + self._prev[1]
        pace = self.pace.view(now) if self.pace is not None else None
        return IngestLoad(
            overloaded=self.last_shed_at is not None and now - self.last_shed_at <= self.window_s,
            applied=self.applied,
            shed=self.shed,
            max_lag_s=max(self._cur[0], self._prev[0]),
            shed_per_s=shed_recent / span if shed_recent else 0.0,
            behind=pace is not None and pace.behind,
            own_lag_s=pace.own_lag_s if pace is not None else 0.0,
            deferred_now=pace.deferred_now if pace is not None else 0,
            deferred=pace.deferred if pace is not None else 0,
        )
