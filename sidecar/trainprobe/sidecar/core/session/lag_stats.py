"""What one rank keeps of its arrival lags, and how they are summed up.

The tracker (``arrival.py``) writes a rank's open window directly from its
inner loop, one comparison at a time; the window's worst lag is folded into
the recent ones when the rank's next report arrives. So the status summary
and the exported histogram see one value per report, not one per collective
(a DDP step has tens), and what a session keeps stays bounded
(:data:`RECENT_LAGS` windows). A session gets its :class:`LagStats` from the
registry, the one writer of sessions, at its first comparison. A rank that
entered a collective long before its last peer (or one that never came)
keeps how long it was kept waiting there (:func:`note_waits`): its long sync
is that peer's doing, not its own.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from trainprobe.sidecar.core.session.model import WorkerState

__all__ = ["BLOCKED_S", "RECENT_LAGS", "LagStats", "LagSummary", "note_waits"]

#: A rank in a collective this long is compared on it even where the group is
#: thinned (see :meth:`ArrivalTracker._blocked
#: <trainprobe.sidecar.core.session.arrival.ArrivalTracker._blocked>`), and a rank kept
#: waiting this long by a late peer remembers it (:attr:`LagStats.waited`);
#: healthy collectives take ms.
BLOCKED_S = 0.5
#: Lags per rank that the status summary is computed over.
RECENT_LAGS = 128


@dataclass(frozen=True)
class LagSummary:
    count: int = 0
    last_s: float = 0.0
    p50_s: float = 0.0
    p99_s: float = 0.0
    max_s: float = 0.0
    missed: int = 0
    group: str = ""


class LagStats:
    """One rank's arrival lags: counts since it connected, and recent windows.

    Lags are folded per report window of the rank: the window's worst lag is
    what the status summary and the exported histogram see, one value per
    report instead of one per collective (a DDP step has tens), which keeps
    the cost per report flat however many collectives a step issues.
    """

    __slots__ = (
        "count",
        "group",
        "missed",
        "recent",
        "waited",
        "win_max",
        "win_missed",
        "win_n",
    )

    def __init__(self) -> None:
        #: Collectives compared, and those the rank had missed, since it connected.
        self.count = 0
        self.missed = 0
        self.group = ""
        #: The worst lag of each recent window, newest last.
        self.recent: deque[float] = deque(maxlen=RECENT_LAGS)
        # The open window: written by the tracker's inner loop directly.
        self.win_max = 0.0
        self.win_n = 0
        self.win_missed = False
        #: The newest collective this rank entered and then waited in for a
        #: late peer (BLOCKED_S or more): (group, seq, wait_s), ``inf`` where a
        #: peer had not entered it at all when the comparison closed. Its long
        #: sync is the peer's doing, not its own (``worker_rules.degraded``).
        self.waited: tuple[str, int, float] | None = None

    def summary(self) -> LagSummary:
        """Over the recent windows and the open one (a stopped rank never closes it)."""
        values = list(self.recent)
        if self.win_n:
            values.append(self.win_max)
        n = len(values)
        if not n:
            return LagSummary(self.count, missed=self.missed, group=self.group)
        ordered = sorted(values)
        return LagSummary(
            self.count + self.win_n,
            values[-1],
            ordered[(n - 1) // 2],
            ordered[min(n - 1, math.ceil(0.99 * n) - 1)],  # nearest rank
            ordered[-1],
            self.missed,
            self.group,
        )


def note_waits(
    members: dict[int, WorkerState],
    arrivals: dict[int, float],
    group: str,
    seq: int,
    last: float,
    attach: Callable[[WorkerState], LagStats],
) -> None:
    """Tell each rank that entered a collective long before its last peer (or
    before a peer that never came) how long it was kept waiting there."""
    for rank, at in arrivals.items():
        w = members.get(rank)
        if w is None or last - at < BLOCKED_S:
            continue
        stats = w.arrival if w.arrival is not None else attach(w)
        if stats.waited is None or stats.waited[0] != group or stats.waited[1] <= seq:
            stats.waited = (group, seq, last - at)
