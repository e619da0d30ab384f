"""What the trace builder remembers about one worker process.

Per worker: the last :data:`STEP_HISTORY` steps and the last
:data:`RECENT_COLLECTIVES` collectives sorted by start (both in int arrays,
which the garbage collector never scans), the records of the steps it traced
(they hold the spans), and the worker's clock mapping. Pure: no OpenTelemetry
import.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from trainprobe.sidecar.core.ring import Ring
from trainprobe.sidecar.core.session.model import CollectiveData, HelloData, WorkerState
from trainprobe.sidecar.otel.traces.spans import (
    AttrValue,
    SpanDesc,
    SpanRef,
    WallClock,
    worker_attributes,
)

#: Steps remembered per worker. What reads them: an incident's last step, the
#: steps of the last report's window (at most ``core.session.model.KEPT_RECENT``) and
#: the step that held a collective of that report. 32 covers them with the
#: report before: at 256 the ring was 8 KB of a session's ~25 after its first
#: report, at 64 2 KB.
STEP_HISTORY = 32
#: Collectives remembered per worker (trimmed at twice this): those a traced step
#: may still take as children, of this report (a hook samples at most 16) and
#: the one before. 1.5 KB at most.
RECENT_COLLECTIVES = 16
#: Distinct (group, op) names a worker's remembered collectives use at most.
MAX_NAMES = 64
#: Numbers a remembered collective keeps beside its start.
_W = 5
_I64_MAX = (1 << 63) - 1


def _clamp(x: int) -> int:
    """A wire uint64 past int64 (a client's garbage) kept at the int64 limit."""
    return x if x <= _I64_MAX else _I64_MAX


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
    #: The exported step span's ids (None: not traced).
    span: SpanRef | None = None
    #: The clock mapping its span used: its collectives use the same one, so they
    #: stay inside their step even if the offset estimate moves meanwhile.
    clock: WallClock | None = None

    def holds(self, mono_ns: int) -> bool:
        return self.start_mono_ns < mono_ns <= self.end_mono_ns


class WorkerTrace:
    """What the builder remembers about one worker process."""

    __slots__ = (
        "_clock",
        "_names",
        "_records",
        "_rows",
        "_starts",
        "attrs",
        "hello",
        "history",
        "last_end_mono_ns",
        "last_step",
        "open_spans",
        "traced",
    )

    def __init__(self, hello: HelloData, local_host: str = "") -> None:
        self.hello = hello
        self.attrs: dict[str, AttrValue] = worker_attributes(hello, local_host)
        #: (number, start ns, end ns, counted) of the last steps, in an int ring
        #: (core.ring.Ring): 1 KB for 32 steps. A deque of tuples of int objects
        #: cost 36 KB for 256 (session_structures.py), and no object per step
        #: keeps the garbage collector's scans short at 1,000 workers.
        self.history: Ring = Ring(STEP_HISTORY, 4, "q")
        #: The records of traced steps (they hold the span), by (number, end ns).
        self._records: dict[tuple[int, int], StepRecord] = {}
        #: Recent collectives sorted by start (late arrivals are inserted): their
        #: starts, and per collective (end, seq, bytes, step, index into
        #: ``_names``) in one int array: 48 bytes a collective, where a tuple of
        #: number and string objects, and a (group, seq) set entry, were ~400.
        self._starts: array[int] = array("q")
        self._rows: array[int] = array("q")
        #: The (group, op) names the remembered collectives use, each once.
        self._names: list[tuple[str, str]] = []
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

    def _name(self, group: str, op: str) -> int:
        names = self._names
        try:
            return names.index((group, op))
        except ValueError:
            if len(names) >= MAX_NAMES:  # a client's garbage: forget what used the old ones
                self._forget_collectives()
            names.append((group, op))
            return len(names) - 1

    def _forget_collectives(self) -> None:
        del self._starts[:], self._rows[:], self._names[:]

    def _find(self, c: CollectiveData) -> int:
        """The row of ``c`` (same start, group and seq), or -1."""
        starts, rows, names = self._starts, self._rows, self._names
        i = bisect.bisect_left(starts, c.start_mono_ns)
        while i < len(starts) and starts[i] == c.start_mono_ns:
            if rows[i * _W + 1] == c.seq and names[rows[i * _W + 4]][0] == c.group:
                return i
            i += 1
        return -1

    def add_collectives(self, samples: Iterable[CollectiveData]) -> None:
        starts, rows = self._starts, self._rows
        for c in samples:
            if self._find(c) >= 0:
                continue
            # Times and the step are int64 on the wire; seq and bytes uint64.
            name = self._name(c.group, c.op)
            row = array("q", (c.end_mono_ns, _clamp(c.seq), _clamp(c.bytes), c.step, name))
            if not starts or c.start_mono_ns >= starts[-1]:
                starts.append(c.start_mono_ns)
                rows.extend(row)
            else:
                i = bisect.bisect_right(starts, c.start_mono_ns)
                starts.insert(i, c.start_mono_ns)
                rows[i * _W : i * _W] = row
        if len(starts) > 2 * RECENT_COLLECTIVES:  # trim in bulk: amortized O(1)
            del starts[:-RECENT_COLLECTIVES], rows[: -RECENT_COLLECTIVES * _W]

    def collectives_in(self, rec: StepRecord) -> list[CollectiveData]:
        """Remembered collectives that started within the step."""
        starts, rows, names = self._starts, self._rows, self._names
        lo = bisect.bisect_right(starts, rec.start_mono_ns)
        hi = bisect.bisect_right(starts, rec.end_mono_ns)
        out = []
        for i in range(lo, hi):
            end, seq, size, step, name = rows[i * _W : i * _W + _W]
            group, op = names[name]
            out.append(CollectiveData(group, seq, op, size, starts[i], end, step))
        return out

    def has_collective(self, c: CollectiveData) -> bool:
        return self._find(c) >= 0

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
        """Remember a traced step's record, and forget the traced steps that ended
        before the remembered history: nothing reads them again. (Pruned only past
        32 records, a worker sampled every 100 steps kept 32 of them, ~5 KB.)"""
        records = self._records
        records[(rec.number, rec.end_mono_ns)] = rec
        if len(records) > 1 and self.history:
            oldest = self.history[0][2]
            for key in [k for k in records if k[1] < oldest]:
                del records[key]
            traced = self.traced
            while traced and traced[0].end_mono_ns < oldest:
                del traced[0]

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
