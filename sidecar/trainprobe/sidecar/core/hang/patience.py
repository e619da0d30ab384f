"""How long an ambiguous hang is watched before it is killed: ``hang_patience_s``.

A verdict is cheap, a kill is expensive. When the evidence cannot prove a
rank will never resume (it sleeps, reads, waits on a lock, computes), the
sidecar names it at once and kills it only once the stall has lasted longer
than the job's healthy stalls ever did.

``auto`` learns from the job's own history: every stall that ended by itself
(an episode closed because its ranks stepped again, no kill) is recorded with
its length and where the culprit was, and the patience is

    max(AUTO_FLOOR_S, AUTO_MULTIPLE x the longest such stall)

The floor, 90 s, is chosen so that under the defaults no healthy transient
stall of up to 60 s is ever killed (a 30 s margin covers the onset estimate,
the tick and the evidence round), while every ambiguous fault is killed
within 120 s of onset (90 s, plus at most one evidence round of about a
second, plus the kill grace well inside the remaining 30 s). A stall of
60 s that ended by itself raises the job's patience to 120 s: the same kind
of stall running twice as long again is still spared.

**Replicated jobs** (torchft replica groups) weigh the cost differently: an
eviction costs one replica's restart while the others go on, not the job's,
and waiting has a deadline of its own, since torchft's timeouts end the step
(or the run) first: the Manager's 60 s ``timeout`` and ``quorum_timeout``,
and 30 s for the gloo process group in Ray's torchft example. So their
ambiguous hangs are watched ``replica_patience_s``: ``auto`` is

    max(REPLICA_FLOOR_S, AUTO_MULTIPLE x the longest such stall)

with a floor of 10 s: it must act well before torchft's timeouts (the
eviction then comes 20 s before the first of them), and no healthy stall
shorter than it is evicted. An 8 s healthy stall (a slow batch, a short eval
that was not declared) ends about 8.1 s after its onset (the onset is the
last step's end, so the stall includes the rest of that step); the step that
ends it is reported at once (the hook reports a step that follows a stall
without waiting for its interval), and the decision needs an evidence round
that sees no step, so 10 s leaves it a margin of about 1.9 s. The survivors
then commit again about one lighthouse heartbeat timeout after the eviction
(1 s recommended): about 11.4 s after the onset of an ambiguous fault, against
a goal of 15 s (bench/bench_torchft.py, docs/PERFORMANCE.md).
A replica evicted at the same place again (its replacement hung there too:
a data-dependent slow step, say) waits BACKOFF_MULTIPLE times longer each
time, up to MAX_BACKOFF_S, so it cannot become an eviction loop; an hour
without an eviction there forgets it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

__all__ = [
    "AUTO_FLOOR_S",
    "AUTO_MULTIPLE",
    "BACKOFF_MULTIPLE",
    "MAX_BACKOFF_S",
    "REPLICA_FLOOR_S",
    "PatienceBook",
    "Stall",
]

AUTO_FLOOR_S = 90.0
AUTO_MULTIPLE = 2.0
REPLICA_FLOOR_S = 10.0
BACKOFF_MULTIPLE = 2.0
MAX_BACKOFF_S = 600.0
#: Evictions at one place are remembered this long.
BACKOFF_WINDOW_S = 3600.0
#: Stalls remembered per job, and jobs remembered (oldest forgotten first).
STALLS_PER_JOB = 32
MAX_JOBS = 1024


@dataclass(frozen=True)
class Stall:
    """A stall that ended by itself."""

    length_s: float
    where: str
    activity: str
    ended_at: float

    def to_record(self) -> dict[str, object]:
        return {"length_s": round(self.length_s, 3), "where": self.where, "activity": self.activity}


class PatienceBook:
    """Per job: the stalls that ended by themselves, and the patience they imply.

    ``setting_s`` is the ``hang_patience_s`` setting: a number of seconds, or
    None for ``auto``.
    """

    def __init__(
        self,
        setting_s: float | None = None,
        floor_s: float = AUTO_FLOOR_S,
        multiple: float = AUTO_MULTIPLE,
        replica_setting_s: float | None = None,
        replica_floor_s: float = REPLICA_FLOOR_S,
    ) -> None:
        self.setting_s = setting_s
        self.floor_s = floor_s
        self.multiple = multiple
        self.replica_setting_s = replica_setting_s
        self.replica_floor_s = replica_floor_s
        self._jobs: OrderedDict[str, deque[Stall]] = OrderedDict()
        #: (job, place) -> sidecar times of its evictions (place: where, else the replica).
        self._evictions: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def record(self, job_id: str, length_s: float, where: str, activity: str, now: float) -> None:
        stalls = self._jobs.get(job_id)
        if stalls is None:
            if len(self._jobs) >= MAX_JOBS:
                self._jobs.popitem(last=False)
            stalls = self._jobs[job_id] = deque(maxlen=STALLS_PER_JOB)
        stalls.append(Stall(max(0.0, length_s), where, activity, now))

    def stalls(self, job_id: str) -> list[Stall]:
        return list(self._jobs.get(job_id, ()))

    def longest(self, job_id: str) -> Stall | None:
        return max(self._jobs.get(job_id, ()), key=lambda s: s.length_s, default=None)

    def record_eviction(self, job_id: str, place: str, now: float) -> None:
        """A replica of ``job_id`` was evicted while stuck at ``place``."""
        key = (job_id, place)
        times = self._evictions.get(key)
        if times is None:
            if len(self._evictions) >= MAX_JOBS:
                self._evictions.popitem(last=False)
            times = self._evictions[key] = deque(maxlen=STALLS_PER_JOB)
        times.append(now)

    def evictions(self, job_id: str, place: str, now: float) -> int:
        """Evictions of ``job_id`` at ``place`` in the last BACKOFF_WINDOW_S."""
        times = self._evictions.get((job_id, place))
        if not times:
            return 0
        while times and now - times[0] >= BACKOFF_WINDOW_S:
            times.popleft()
        return len(times)

    def replica_patience_s(self, job_id: str, place: str, now: float) -> tuple[float, str]:
        """(seconds, basis) for a replicated job's ambiguous hang stuck at ``place``."""
        if self.replica_setting_s is not None:
            base, basis = self.replica_setting_s, "replicated, explicit"
        else:
            longest = self.longest(job_id)
            base, basis = self.replica_floor_s, "replicated, auto floor"
            if longest is not None and self.multiple * longest.length_s > base:
                base = self.multiple * longest.length_s
                basis = (
                    f"replicated, auto: {self.multiple:g} x the longest stall that ended by "
                    f"itself ({longest.length_s:.0f}s)"
                )
        n = self.evictions(job_id, place, now) if place else 0
        if n == 0:
            return base, basis
        # Never shorter than the base, never longer than the cap (unless the base is).
        backed = max(base, min(MAX_BACKOFF_S, base * BACKOFF_MULTIPLE**n))
        return backed, f"{basis}; x{BACKOFF_MULTIPLE**n:g}: evicted {n} time(s) at {place} before"

    def patience_s(self, job_id: str) -> tuple[float, str]:
        """(seconds, basis): how long an ambiguous hang of ``job_id`` is watched."""
        if self.setting_s is not None:
            return self.setting_s, "explicit"
        longest = self.longest(job_id)
        if longest is None or self.multiple * longest.length_s <= self.floor_s:
            return self.floor_s, "auto floor"
        return (
            self.multiple * longest.length_s,
            f"auto: {self.multiple:g} x the longest stall that ended by itself "
            f"({longest.length_s:.0f}s at {longest.where or longest.activity or '?'})",
        )
