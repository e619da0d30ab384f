"""``trainprobe top``'s model: what it keeps of every rank between refreshes.

Plain data updated from ``GetStatus`` and ``Diagnose`` replies, so the demos
and ``trainprobe report`` use it too.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.cli.status_text import decision_words

__all__ = [
    "FEED_LINES",
    "LAG_BAD_S",
    "STYLES",
    "WINDOWS",
    "RankRow",
    "TopModel",
    "colour",
    "job_step_s",
    "shown_verdict",
]

#: Windows of history shown per rank.
WINDOWS = 40
#: Lines of incident feed shown.
FEED_LINES = 8
#: Arrival lag above which a window is yellow, and red (seconds). A lag of
#: 50 ms is scheduling noise on a busy host; half a second is a rank that
#: holds its whole job back for a noticeable share of a step.
LAG_WARN_S, LAG_BAD_S = 0.05, 0.5
#: Step time, relative to the job's median rank: yellow above, red above.
STEP_WARN, STEP_BAD = 1.5, 3.0
STYLES = ("green", "yellow", "bold red")


@dataclass
class RankRow:
    """What top keeps of one rank between refreshes."""

    status: probe_pb2.WorkerStatus
    #: (step_s, lag_s) per window, newest last; None where unknown.
    cells: deque[tuple[float | None, float | None]] = field(
        default_factory=lambda: deque(maxlen=WINDOWS)
    )
    last_step: int = -1
    last_at: float = 0.0
    lag_count: int = 0
    lag_missed: int = 0
    #: The lag of the collective the rank last failed to enter, while it still has not.
    missing_s: float | None = None
    #: Its verdict as last shown (:func:`shown_verdict`), to note changes only.
    shown: str = ""


@dataclass
class TopModel:
    """Rows by (job, rank), culprits by job, and the feed; updated once per refresh."""

    rows: dict[tuple[str, int], RankRow] = field(default_factory=dict)
    culprits: dict[str, set[int]] = field(default_factory=dict)
    #: The (kind, culprits) of each job's latest diagnosis, to note changes only.
    findings: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    feed: deque[str] = field(default_factory=lambda: deque(maxlen=FEED_LINES))
    #: The ranks each job's latest diagnosis says wait for its culprits.
    waiting: dict[str, set[int]] = field(default_factory=dict)
    #: Each job's decision as it stands, or as it ended: the patience countdown
    #: while the sidecar watches (status's words), then what it did and when.
    decisions: dict[str, str] = field(default_factory=dict)

    def update(self, reply: probe_pb2.StatusReply, diagnoses: dict[str, dict], now: float) -> None:
        stamp = time.strftime("%H:%M:%S")
        watched: dict[str, str] = {}
        acted: dict[str, list[str]] = {}
        resumed: set[str] = set()
        for w in reply.workers:
            key = (w.job_id, w.rank)
            shown = shown_verdict(w)
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = RankRow(w)
            else:
                self._note_changes(stamp, row, w, shown)
                if shown in ("KILLED", "EVICTED") and row.shown != shown:
                    how = decision_words(w)[1]
                    acted.setdefault(w.job_id, []).append(f"{shown} rank {w.rank} {how}")
                if row.shown == "PAUSED" and shown != "PAUSED":
                    resumed.add(w.job_id)
            cell = (_step_s(row, w, now), _lag_s(row, w))
            # A rank whose stream is over runs no step and enters no collective.
            row.cells.append(cell if w.state == "connected" else (None, None))
            row.status, row.shown = w, shown
            if w.suspect and w.job_id not in watched:
                watched[w.job_id] = w.suspect
        self._decide(stamp, watched, acted, resumed, {w.job_id for w in reply.workers})
        for job, diag in diagnoses.items():
            culprits = {int(r) for r in diag.get("culprits") or []}
            kind = str(diag.get("kind") or "healthy")
            finding = (kind, tuple(sorted(culprits)))
            # The summary's text changes every second ("5.7s ago"): note a new finding only.
            if kind != "healthy" and finding != self.findings.get(job):
                self.feed.append(f"{stamp} {job}: {kind}: {diag.get('summary', '')}")
            self.findings[job] = finding
            self.culprits[job] = culprits
            self.waiting[job] = {int(r) for r in diag.get("waiting") or []} - culprits

    def _decide(
        self,
        stamp: str,
        watched: dict[str, str],
        acted: dict[str, list[str]],
        resumed: set[str],
        jobs: set[str],
    ) -> None:
        """Each job's decision line: as it happens, and after it."""
        for job in jobs:
            before = self.decisions.get(job, "")
            if job in acted:
                self.decisions[job] = f"{'; '.join(acted[job])} at {stamp}"
            elif job in watched:
                self.decisions[job] = watched[job]
            elif job in resumed:
                self.decisions[job] = f"RESUMED at {stamp}: the pause ended; nothing was killed"
                self.feed.append(f"{stamp} {job}: PAUSED -> RESUMED")
            elif before.startswith("HUNG?"):
                # The countdown is gone without a kill: the stall ended by itself.
                self.decisions[job] = f"RESUMED at {stamp}: the stall ended; nothing was killed"

    def _note_changes(
        self, stamp: str, row: RankRow, new: probe_pb2.WorkerStatus, shown: str
    ) -> None:
        who = f"{new.job_id} rank {new.rank}"
        if shown != row.shown:
            self.feed.append(f"{stamp} {who}: {row.shown} -> {shown}")
        if new.state != row.status.state:
            self.feed.append(f"{stamp} {who}: stream {new.state}")


def shown_verdict(w: probe_pb2.WorkerStatus) -> str:
    """The rank's verdict as top shows it: KILLED, EVICTED or PAUSED once the
    sidecar decided so (status's words), else its verdict (a countdown's
    ``HUNG?`` is the verdict HUNG: the decision line has the countdown)."""
    word = decision_words(w)[0]
    return w.verdict if word.endswith("?") else word


def _step_s(row: RankRow, w: probe_pb2.WorkerStatus, now: float) -> float | None:
    """Seconds per step over the window; a rank stuck in a step: its step's age so far.

    None for a rank whose stream is over: it runs no step, and its step's age is
    the time since it ended (a finished job read as a 390 s "step")."""
    step_s = None
    if w.state != "connected":
        row.last_step = -1
        return None
    if row.last_step >= 0 and w.has_step:
        done = w.step - row.last_step
        if done > 0:
            step_s = (now - row.last_at) / done
        elif w.step_age_s > 0:
            step_s = w.step_age_s
    row.last_step, row.last_at = (w.step if w.has_step else -1), now
    return step_s


def _lag_s(row: RankRow, w: probe_pb2.WorkerStatus) -> float | None:
    if not w.HasField("arrival_lag"):
        return None
    lag = w.arrival_lag
    fresh = lag.count != row.lag_count
    missed = lag.missed != row.lag_missed
    row.lag_count, row.lag_missed = lag.count, lag.missed
    if fresh:
        # A rank counted missed has not entered a collective its peers are in:
        # it stays that late until a comparison shows it arriving again.
        row.missing_s = lag.last_s if missed else None
        return lag.last_s
    # No new comparison in this window: a blank, unless the rank is still missing.
    return row.missing_s


def colour(value: float | None, by: str, job_step_s: float | None) -> int:
    """0 green, 1 yellow, 2 red; -1 unknown."""
    if value is None:
        return -1
    if by == "lag":
        return 2 if value >= LAG_BAD_S else 1 if value >= LAG_WARN_S else 0
    if not job_step_s:
        return 0
    ratio = value / job_step_s
    return 2 if ratio >= STEP_BAD else 1 if ratio >= STEP_WARN else 0


def job_step_s(model: TopModel, job: str) -> float | None:
    latest = [
        s
        for (j, _), row in model.rows.items()
        if j == job and row.cells and (s := row.cells[-1][0])
    ]
    return statistics.median(latest) if latest else None
