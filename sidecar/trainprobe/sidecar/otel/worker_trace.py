"""What the trace builder remembers about one worker process.

Per worker: the last :data:`STEP_HISTORY` steps (plain tuples, which the
garbage collector stops tracking), the records of the steps it traced (they
hold the spans), the last :data:`RECENT_COLLECTIVES` collectives sorted by
start, and the worker's clock mapping. Pure: no OpenTelemetry import.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from trainprobe.sidecar.core.model import CollectiveData, HelloData, WorkerState
from trainprobe.sidecar.core.ring import Ring
from trainprobe.sidecar.otel.spans import AttrValue, SpanDesc, WallClock, worker_attributes

#: Steps remembered per worker. What reads them: an incident's last step, the
#: steps of the last report's window (at most ``core.model.KEPT_RECENT``) and
#: the step that held a collective of that report. 64 covers them: at 256 the
#: ring was 8 KB of a session's ~25 after its first report.
STEP_HISTORY = 64
#: Collectives remembered per worker (trimmed at twice this): those of the
#: remembered steps, which a hook samples at most 16 of a report.
RECENT_COLLECTIVES = 128
#: Traced steps that a late collective is still matched against.
TRACED_STEPS = 8
#: Incident-made spans remembered per worker.
OPEN_SPANS = 64
#: The clock mapping of a worker is kept until the estimate moves this much.
REPIN_S = 0.001


@dataclass(slots=True)
class StepRecord:
    number: int
    start_mono_ns: int
    end_mono_ns: int
    counted: bool
    span: SpanDesc | None = None
    #: The clock mapping its span used: its collectives use the same one, so they
    #: stay inside their step even if the offset estimate moves meanwhile.
    clock: WallClock | None = None

    def holds(self, mono_ns: int) -> bool:
        return self.start_mono_ns < mono_ns <= self.end_mono_ns


class WorkerTrace:
    """What the builder remembers about one worker process."""

    def __init__(self, hello: HelloData, local_host: str = "") -> None:
        self.hello = hello
        self.attrs: dict[str, AttrValue] = worker_attributes(hello, local_host)
        #: (number, start ns, end ns, counted) of the last steps: plain tuples of
        #: ints, which the garbage collector stops tracking. One StepRecord per step
        #: (256 a worker) gave every collection that reached them ~250,000 more
        #: objects to scan at 1,000 workers (issue 15).
        #: In an int ring (core.ring.Ring): 2 KB for 64 steps, where a deque of
        #: tuples of int objects cost 36 KB for 256 (session_structures.py).
        self.history: Ring = Ring(STEP_HISTORY, 4, "q")
        #: The records of traced steps (they hold the span), by (number, end ns).
        self._records: dict[tuple[int, int], StepRecord] = {}
        #: Recent collectives sorted by start (late arrivals are inserted), kept as
        #: plain tuples: the garbage collector need not scan thousands of them.
        self._colls: list[tuple[int, int, str, int, str, int, int]] = []
        self._starts: list[int] = []
        #: (group, seq) of the remembered ones: a resent sample is not added twice.
        self._keys: set[tuple[str, int]] = set()
        #: The last :data:`TRACED_STEPS` traced, oldest first: a list (an empty one
        #: is 56 bytes; a deque is 760 whether it holds anything or not).
        self.traced: list[StepRecord] = []
        self.last_end_mono_ns: int | None = None
        self.last_step: int | None = None
        #: Spans made for incidents, by (kind, key), so two incidents share them.
        self.open_spans: dict[tuple[str, object], SpanDesc] = {}
        self._clock: WallClock | None = None

    def clock(self, state: WorkerState, wall_minus_mono_s: float) -> WallClock:
        """The worker-to-wall mapping, pinned so that its spans keep the worker's own
        time differences (the offset estimate wobbles by the report delay).

        A worker verified in this sidecar's PID namespace maps exactly: by its
        time namespace's offset (0 in ours, as the kernel says). Others use the
        registry's min-delay estimate.
        """
        offset = -state.mono_ahead_s if state.local else state.offset_s
        pinned = self._clock
        if (
            pinned is None
            or abs(pinned.worker_offset_s - offset) > REPIN_S
            or abs(pinned.wall_minus_mono_s - wall_minus_mono_s) > REPIN_S
        ):
            pinned = self._clock = WallClock(wall_minus_mono_s, offset)
        return pinned

    def add_collectives(self, samples: Iterable[CollectiveData]) -> None:
        starts, colls, keys = self._starts, self._colls, self._keys
        for c in samples:
            if (c.group, c.seq) in keys:
                continue
            keys.add((c.group, c.seq))
            row = (c.start_mono_ns, c.end_mono_ns, c.group, c.seq, c.op, c.bytes, c.step)
            if not starts or c.start_mono_ns >= starts[-1]:
                starts.append(c.start_mono_ns)
                colls.append(row)
            else:
                i = bisect.bisect_right(starts, c.start_mono_ns)
                starts.insert(i, c.start_mono_ns)
                colls.insert(i, row)
        if len(starts) > 2 * RECENT_COLLECTIVES:  # trim in bulk: amortized O(1)
            del starts[:-RECENT_COLLECTIVES], colls[:-RECENT_COLLECTIVES]
            self._keys = {(row[2], row[3]) for row in colls}

    def collectives_in(self, rec: StepRecord) -> list[CollectiveData]:
        """Remembered collectives that started within the step."""
        lo = bisect.bisect_right(self._starts, rec.start_mono_ns)
        hi = bisect.bisect_right(self._starts, rec.end_mono_ns)
        return [
            CollectiveData(group, seq, op, size, start, end, step)
            for start, end, group, seq, op, size, step in self._colls[lo:hi]
        ]

    def has_collective(self, c: CollectiveData) -> bool:
        return (c.group, c.seq) in self._keys

    @property
    def remembered_collectives(self) -> int:
        return len(self._starts)

    def remember(self, key: tuple[str, object], span: SpanDesc) -> None:
        self.open_spans[key] = span
        if len(self.open_spans) > OPEN_SPANS:
            del self.open_spans[next(iter(self.open_spans))]

    def note_traced(self, rec: StepRecord) -> None:
        traced = self.traced
        traced.append(rec)
        if len(traced) > TRACED_STEPS:
            del traced[0]

    def record(self, step: tuple[int, int, int, bool]) -> StepRecord:
        """The record of a remembered step: the traced one if it was traced."""
        rec = self._records.get((step[0], step[2]))
        return rec if rec is not None else StepRecord(step[0], step[1], step[2], bool(step[3]))

    def keep(self, rec: StepRecord) -> None:
        """Remember a traced step's record (and forget those older than the history)."""
        records = self._records
        records[(rec.number, rec.end_mono_ns)] = rec
        if len(records) > STEP_HISTORY and self.history:
            oldest = self.history[0][2]
            for key in [k for k in records if k[1] < oldest]:
                del records[key]

    @property
    def steps(self) -> list[StepRecord]:
        """The remembered steps, oldest first (built on demand: incidents only)."""
        return [self.record(t) for t in self.history]

    def last_record(self) -> StepRecord | None:
        return self.record(self.history[-1]) if self.history else None

    def step_at(self, mono_ns: int) -> StepRecord | None:
        """The step whose interval (start, end] holds ``mono_ns``."""
        for step in reversed(self.history):
            if step[2] < mono_ns:
                return None
            if step[1] < mono_ns:
                return self.record(step)
        return None

    def step_before(self, mono_ns: int) -> int:
        """The number of the last step that ended at or before ``mono_ns``."""
        for step in reversed(self.history):
            if step[2] <= mono_ns:
                return step[0]
        return self.history[0][0] - 1 if self.history else 0
