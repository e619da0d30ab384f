"""Collective accounting: per-group sequence numbers, in-flight ages, latencies.

Two sides share each :class:`GroupLedger` without a lock:

- The issuing side (the training thread, or autograd's thread for DDP
  buckets) calls :meth:`GroupLedger.issue`: it takes the next sequence number,
  builds a small record and appends it to a bounded deque. Completion is one
  store of the host clock into that record, or, on CUDA, an event recorded on
  the stream after the collective.
- The reporter thread calls :meth:`SyncLedger.collect`: it drains the deques,
  decides which records finished (host time, or ``event.query()`` then
  ``elapsed_time``, neither of which waits for the device) and turns them into
  a window of statistics and per-group counters.

Under the GIL, ``deque.append``/``popleft``, ``next(itertools.count)`` and a
list item store are atomic, so neither side ever waits for the other. Nothing
here imports torch. What a window says, and its report message, is
``sync_window.py``.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import sys
import time
from typing import Any, Protocol

from trainprobe.hooks.watch.sync_window import FinishedOp, GroupCounters, SyncWindow, sync_stats_pb

__all__ = [
    "MAX_GROUPS",
    "MAX_INFLIGHT",
    "MAX_PENDING",
    "MAX_SAMPLES",
    "MAX_STARTS",
    "FinishedOp",
    "GroupCounters",
    "GroupLedger",
    "Record",
    "StepSource",
    "SyncLedger",
    "SyncWindow",
    "finished_duration_s",
    "group_label",
    "sync_stats_pb",
]

#: Records a group may hold between two reports; older ones are dropped and
#: counted as completed (a reporter that fell this far behind is not
#: watching a hang: a hung group issues nothing new).
MAX_PENDING = 4096
#: Collectives a group tracks in flight at most; newer ones beyond it are
#: counted finished unseen (the oldest, which the rules judge, stay tracked).
MAX_INFLIGHT = 4 * MAX_PENDING
#: At most this many groups are tracked, the last one, "other", shared by the rest.
MAX_GROUPS = 256
#: Finished collectives a report carries individually (the window's slowest).
MAX_SAMPLES = 16
#: Issue times a group reports per window, the newest: enough for every
#: collective of a DDP step or several, few enough to keep a report small. The
#: sidecar matches them across ranks by seq, so a busier group's older ones are
#: simply not compared.
MAX_STARTS = 64

# A record is a plain list, not an object: building one costs ~80 ns instead of
# ~350 ns for a slotted class, and the DDP comm hook budget is 2 us per bucket.
SEQ, OP, NBYTES, START_NS, END_NS, STEP, EVENTS = range(7)
#: ``EVENTS`` holds None (host-timed) or ``(start_event, end_event, pool)``; the
#: pool records events (``pool.record(event)``) and takes them back once read.
#: One watched collective, as a mutable list indexed by the constants above
#: (a list: cheaper than an object on the training thread).
Record = list[Any]


class StepSource(Protocol):
    """Anything with ``n``, the number of completed steps (a ``StepRing``)."""

    n: int


class GroupLedger:
    """One process group's collectives, in the order this process issued them."""

    def __init__(self, name: str, steps: StepSource, max_pending: int = MAX_PENDING) -> None:
        self.name = name
        self._steps = steps
        self._next_seq = itertools.count(1)
        self._pending: collections.deque[Record] = collections.deque(maxlen=max_pending)
        #: Whether user collectives on this group are timed with CUDA events;
        #: None until known (the hook decides, once CUDA is in use).
        self.on_cuda: bool | None = None
        # Reporter-owned from here on.
        self.issued = 0
        self.completed = 0
        self.dropped = 0
        self._inflight: list[Record] = []

    # -- issuing side ------------------------------------------------------------

    def issue(self, op: str, nbytes: int, events: tuple[Any, Any, Any] | None = None) -> Record:
        """Number and timestamp a collective about to be launched."""
        rec = [
            next(self._next_seq),
            op,
            nbytes,
            time.monotonic_ns(),
            0,
            self._steps.n + 1,
            events,
        ]
        self._pending.append(rec)
        return rec

    # -- reporter side -----------------------------------------------------------

    def drain(self, finished: list[FinishedOp]) -> GroupCounters:
        """Move issued records in, retire the finished ones into ``finished``."""
        late: list[Record] = []
        started: list[tuple[int, int]] = []
        while True:
            try:
                rec = self._pending.popleft()
            except IndexError:
                break
            seq = rec[SEQ]
            if seq <= self.issued:
                late.append(rec)  # another thread appended out of order
                continue
            gap = seq - self.issued - 1
            if gap:
                # Dropped from the full deque (or still being appended): count
                # them finished; a late arrival below undoes that.
                self.dropped += gap
                self.completed += gap
            self.issued = seq
            self._inflight.append(rec)
            started.append((seq, rec[START_NS]))
        for rec in late:
            self.dropped -= 1
            self.completed -= 1
            self._inflight.append(rec)
            started.append((rec[SEQ], rec[START_NS]))
        if late:
            started.sort()
        started_t = tuple(started[-MAX_STARTS:])
        if late:
            self._inflight.sort(key=lambda r: r[SEQ])
        excess = len(self._inflight) - MAX_INFLIGHT
        if excess > 0:
            # A device that stopped completing work while the host kept
            # issuing: keep memory bounded, and the oldest for the rules.
            del self._inflight[MAX_INFLIGHT:]
            self.dropped += excess
            self.completed += excess
        still: list[Record] = []
        for rec in self._inflight:
            duration = finished_duration_s(rec)
            if duration is None:
                still.append(rec)
                continue
            self.completed += 1
            finished.append(
                FinishedOp(
                    self.name, rec[SEQ], rec[OP], rec[NBYTES], rec[START_NS], duration, rec[STEP]
                )
            )
        self._inflight = still
        if not still:
            return GroupCounters(self.name, self.issued, self.completed, started=started_t)
        oldest = still[0]
        return GroupCounters(
            self.name,
            self.issued,
            self.completed,
            oldest[START_NS],
            oldest[OP],
            oldest[SEQ],
            started_t,
        )


def finished_duration_s(rec: Record) -> float | None:
    """The latency of a finished collective, or None while it is in flight."""
    end_ns = rec[END_NS]
    if not end_ns:
        return None
    events = rec[EVENTS]
    if events is None:
        return max(0.0, float(end_ns - rec[START_NS]) / 1e9)
    start_ev, end_ev, pool = events
    try:
        if not end_ev.query():
            return None
        duration = max(0.0, float(start_ev.elapsed_time(end_ev)) / 1e3)
    except Exception:
        # A CUDA error makes every later call fail too: fall back to host time.
        return max(0.0, float(end_ns - rec[START_NS]) / 1e9)
    rec[EVENTS] = None
    pool.give(start_ev, end_ev)
    return duration


class SyncLedger:
    """Every group this process issued watched collectives on."""

    def __init__(self, steps: StepSource) -> None:
        self._steps = steps
        self._groups: dict[Any, GroupLedger] = {}
        self._by_name: dict[str, GroupLedger] = {}

    def group(self, group: Any = None) -> GroupLedger:
        """The ledger of ``group``: None (world), a ProcessGroup, or a label."""
        ledger = self._groups.get(group if group is not None else "default")
        if ledger is not None:
            return ledger
        name = group_label(group)
        if name not in self._by_name and len(self._by_name) >= MAX_GROUPS - 1:
            name = "other"
        # setdefault is atomic: two threads racing here end up with one ledger.
        ledger = self._by_name.setdefault(name, GroupLedger(name, self._steps))
        return self._groups.setdefault(group if group is not None else "default", ledger)

    def collect(self) -> SyncWindow | None:
        """The window since the last call; None before any watched collective."""
        ledgers = list(self._by_name.values())
        if not ledgers:
            return None
        window = SyncWindow()
        finished: list[FinishedOp] = []
        for ledger in ledgers:
            window.groups.append(ledger.drain(finished))
        window.durations_s = [f.duration_s for f in finished]
        window.nbytes = sum(f.nbytes for f in finished)
        window.samples = heapq.nlargest(MAX_SAMPLES, finished, key=lambda f: f.duration_s)
        return window


def group_label(group: Any) -> str:
    """A name for a process group that every member rank computes alike.

    "default" for the world group; torch's ``group_desc`` and ``group_name``
    (assigned in creation order, which all ranks share) otherwise; a string
    is taken as the label itself.
    """
    if group is None:
        return "default"
    if isinstance(group, str):
        return group or "default"
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_initialized() and group is dist.group.WORLD:
            return "default"
    except Exception:
        pass
    desc = str(getattr(group, "group_desc", "") or "")
    name = str(getattr(group, "group_name", "") or "")
    if desc == "default_pg":
        return "default"
    base = f"pg{name}" if name else "pg"
    return f"{desc}/{base}" if desc and desc != "undefined" else base
