"""Which spans exist: steps, collectives and phases, built from reports.

Pure and single-threaded (it runs on the sidecar's loop), with bounded memory:
per worker it remembers the last :data:`STEP_HISTORY` steps and up to
:data:`PENDING_COLLECTIVES` collectives whose step has not ended yet, and it
forgets the least recently heard-from workers beyond :data:`MAX_WORKERS`.

Sampling: a step is traced when ``step % every_n_steps == 0``, or when the
worker's verdict was not OK as the report came in (so the steps around
trouble are always traced). :mod:`incident_spans` later adds the steps that
crossed a rule: the step that never finished, or the window that was slow.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from trainprobe.sidecar.core.model import (
    CollectiveData,
    HelloData,
    PhaseData,
    ReportData,
    Verdict,
    WorkerState,
)
from trainprobe.sidecar.otel.ids import step_trace_id
from trainprobe.sidecar.otel.spans import (
    AttrValue,
    SpanDesc,
    WallClock,
    collective_span,
    phase_span,
    step_span,
    worker_attributes,
)

STEP_HISTORY = 256
PENDING_COLLECTIVES = 1024
#: Collectives kept per untraced step, in case an incident traces it later.
COLLECTIVES_PER_STEP = 64
MAX_WORKERS = 4096
#: Incident-made spans remembered per worker.
OPEN_SPANS = 64
#: The clock mapping of a worker is kept until the estimate moves this much.
REPIN_S = 0.001


@dataclass
class StepRecord:
    number: int
    start_mono_ns: int
    end_mono_ns: int
    counted: bool
    span: SpanDesc | None = None
    #: The clock mapping its span used: its collectives use the same one, so they
    #: stay inside their step even if the offset estimate moves meanwhile.
    clock: WallClock | None = None
    #: Collectives of a step not (yet) traced.
    collectives: list[CollectiveData] = field(default_factory=list)


class WorkerTrace:
    """What the builder remembers about one worker process."""

    def __init__(self, hello: HelloData, local_host: str = "") -> None:
        self.hello = hello
        self.attrs: dict[str, AttrValue] = worker_attributes(hello, local_host)
        self.steps: deque[StepRecord] = deque(maxlen=STEP_HISTORY)
        self.pending: deque[CollectiveData] = deque(maxlen=PENDING_COLLECTIVES)
        self.last_end_mono_ns: int | None = None
        self.last_step: int | None = None
        #: Spans made for incidents, by (kind, key), so two incidents share them.
        self.open_spans: dict[tuple[str, object], SpanDesc] = {}
        self._clock: WallClock | None = None

    def clock(self, state: WorkerState, wall_minus_mono_s: float) -> WallClock:
        """The worker-to-wall mapping, pinned so that its spans keep the worker's own
        time differences (the offset estimate wobbles by the report delay).

        A worker in this sidecar's PID namespace shares its CLOCK_MONOTONIC:
        its offset is exactly 0. Others use the registry's min-delay estimate.
        """
        offset = 0.0 if state.local else state.offset_s
        pinned = self._clock
        if (
            pinned is None
            or abs(pinned.worker_offset_s - offset) > REPIN_S
            or abs(pinned.wall_minus_mono_s - wall_minus_mono_s) > REPIN_S
        ):
            pinned = self._clock = WallClock(wall_minus_mono_s, offset)
        return pinned

    def remember(self, key: tuple[str, object], span: SpanDesc) -> None:
        self.open_spans[key] = span
        if len(self.open_spans) > OPEN_SPANS:
            del self.open_spans[next(iter(self.open_spans))]

    def step_at(self, mono_ns: int) -> StepRecord | None:
        """The step whose interval (start, end] holds ``mono_ns``."""
        for rec in reversed(self.steps):
            if rec.end_mono_ns < mono_ns:
                return None
            if rec.start_mono_ns < mono_ns:
                return rec
        return None

    def step_before(self, mono_ns: int) -> int:
        """The number of the last step that ended at or before ``mono_ns``."""
        for rec in reversed(self.steps):
            if rec.end_mono_ns <= mono_ns:
                return rec.number
        return self.steps[0].number - 1 if self.steps else 0


def _key(hello: HelloData) -> tuple[str, int, int]:
    return (hello.job_id, hello.rank, hello.pid)


class TraceBuilder:
    """Turns each accepted report into the spans it completes."""

    def __init__(self, every_n_steps: int = 100, local_host: str = "") -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        #: The sidecar's host name: workers elsewhere get a trainprobe.host attribute.
        self.local_host = local_host
        self._workers: OrderedDict[tuple[str, int, int], WorkerTrace] = OrderedDict()

    def worker(self, hello: HelloData) -> WorkerTrace:
        key = _key(hello)
        wt = self._workers.get(key)
        if wt is None or (wt.hello is not hello and wt.hello != hello):
            wt = self._workers[key] = WorkerTrace(hello, self.local_host)
            if len(self._workers) > MAX_WORKERS:
                self._workers.popitem(last=False)
        self._workers.move_to_end(key)
        return wt

    def known(self, hello: HelloData) -> WorkerTrace | None:
        return self._workers.get(_key(hello))

    def on_report(
        self, state: WorkerState, report: ReportData, wall_minus_mono_s: float
    ) -> list[SpanDesc]:
        """Spans completed by ``report`` (call after the registry applied it)."""
        wt = self.worker(state.hello)
        clock = wt.clock(state, wall_minus_mono_s)
        force = state.verdict is not Verdict.OK
        out: list[SpanDesc] = []
        for number, end_ns, dur_s in zip(
            report.recent_steps,
            report.recent_step_end_mono_ns,
            report.recent_step_s,
            strict=False,
        ):
            if wt.last_end_mono_ns is not None and end_ns <= wt.last_end_mono_ns:
                continue  # seen already (a report resent after a reconnect)
            if dur_s > 0:
                start_ns = end_ns - round(dur_s * 1e9)
            else:
                start_ns = wt.last_end_mono_ns if wt.last_end_mono_ns is not None else end_ns
            rec = StepRecord(number, start_ns, end_ns, counted=dur_s > 0)
            wt.steps.append(rec)
            wt.last_end_mono_ns, wt.last_step = end_ns, number
            sampled = number % self.every_n_steps == 0
            if sampled or force:
                rec.span = self._step_span(wt, rec, clock, sampled)
                out.append(rec.span)
        for phase in report.finished_phases:
            out.append(self._phase_span(wt, phase, clock))
        if report.sync is not None and report.sync.samples:
            wt.pending.extend(report.sync.samples)
        if wt.pending:
            out.extend(self._place_collectives(wt, clock))
        return out

    def trace_step(self, wt: WorkerTrace, rec: StepRecord, clock: WallClock) -> list[SpanDesc]:
        """Trace a remembered step now (and its kept collectives), if not yet traced."""
        if rec.span is not None:
            return []
        rec.span = self._step_span(wt, rec, clock, sampled=False)
        out = [rec.span]
        out.extend(collective_span(wt.hello, wt.attrs, rec.span, c, clock) for c in rec.collectives)
        rec.collectives.clear()
        return out

    def _step_span(
        self, wt: WorkerTrace, rec: StepRecord, clock: WallClock, sampled: bool
    ) -> SpanDesc:
        rec.clock = clock
        return step_span(
            wt.hello,
            wt.attrs,
            step_trace_id(wt.hello.job_id, rec.number),
            rec.number,
            clock.worker_ns(rec.start_mono_ns),
            clock.worker_ns(rec.end_mono_ns),
            counted=rec.counted,
            sampled=sampled,
        )

    def _phase_span(self, wt: WorkerTrace, phase: PhaseData, clock: WallClock) -> SpanDesc:
        step = wt.step_before(phase.start_mono_ns)
        return phase_span(
            wt.hello,
            wt.attrs,
            step_trace_id(wt.hello.job_id, step),
            step,
            phase,
            clock.worker_ns(phase.start_mono_ns),
            clock.worker_ns(phase.end_mono_ns),
        )

    def _place_collectives(self, wt: WorkerTrace, clock: WallClock) -> list[SpanDesc]:
        """Give each pending collective to the step it ran in, once that step ended."""
        out: list[SpanDesc] = []
        keep: deque[CollectiveData] = deque(maxlen=PENDING_COLLECTIVES)
        for c in wt.pending:
            rec = wt.step_at(c.start_mono_ns)
            if rec is None:
                # Its step is still running: wait for it. Otherwise it is older
                # than every step remembered, and is dropped.
                if wt.last_end_mono_ns is None or c.start_mono_ns > wt.last_end_mono_ns:
                    keep.append(c)
                continue
            if rec.span is not None:
                out.append(collective_span(wt.hello, wt.attrs, rec.span, c, rec.clock or clock))
            elif len(rec.collectives) < COLLECTIVES_PER_STEP:
                rec.collectives.append(c)
        wt.pending = keep
        return out
