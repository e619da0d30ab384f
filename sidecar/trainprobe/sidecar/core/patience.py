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
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

__all__ = ["AUTO_FLOOR_S", "AUTO_MULTIPLE", "PatienceBook", "Stall"]

AUTO_FLOOR_S = 90.0
AUTO_MULTIPLE = 2.0
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
    ) -> None:
        self.setting_s = setting_s
        self.floor_s = floor_s
        self.multiple = multiple
        self._jobs: OrderedDict[str, deque[Stall]] = OrderedDict()

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
