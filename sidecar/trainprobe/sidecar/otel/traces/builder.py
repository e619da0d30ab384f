"""Which spans exist: steps, collectives and phases, built from reports.

Pure and single-threaded (it runs on the sidecar's loop), with bounded memory:
per worker it remembers the last :data:`STEP_HISTORY` steps and the last
:data:`RECENT_COLLECTIVES` collectives, and beyond :data:`MAX_WORKERS` workers
it forgets the one it met first.

Most reports trace nothing, so the common path only appends: a collective is
matched to its step when that step gets traced (it may have arrived before
the step ended), or on arrival if its step was traced already (it may arrive
after).

Sampling: a step is traced when ``step % every_n_steps == 0``, or when the
worker's verdict was not OK as the report came in (so the steps around
trouble are always traced). :mod:`incident_spans` later adds the steps that
crossed a rule: the step that never finished, or the window that was slow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from trainprobe.sidecar.core.limits import MAX_SESSIONS
from trainprobe.sidecar.core.session.model import (
    CollectiveData,
    HelloData,
    PhaseData,
    ReportData,
    Verdict,
    WorkerState,
)
from trainprobe.sidecar.otel.traces.ids import step_trace_id
from trainprobe.sidecar.otel.traces.spans import (
    SpanDesc,
    WallClock,
    collective_span,
    phase_span,
    step_span,
)
from trainprobe.sidecar.otel.traces.worker import StepRecord, WorkerTrace

#: Workers remembered at most (the one met first goes first); the sidecar
#: also drops those its registry has forgotten (:meth:`TraceBuilder.retain`).
#: Above a job's worker count, reports evict each other round-robin: every report
#: then rebuilt its worker's state (the cost) and no worker kept the step history
#: its incident spans need (the harm), so this is sized for every session the
#: registry can hold: a relay upstream takes thousands of workers. At 4,096 the
#: harm began past that many. A worker's trace state is about 5 KiB with a
#: 64-step history: 10,000 relayed sessions peaked 32 MB higher than with 4,096
#: (bench/bench_session_cost.py --relayed 8).
MAX_WORKERS = MAX_SESSIONS

#: The sidecar's ``time.time() - time.monotonic()``, or a function that gives it.
WallMinusMono = float | Callable[[], float]


def _clock(wt: WorkerTrace, state: WorkerState, wall_minus_mono_s: WallMinusMono) -> WallClock:
    wmm = wall_minus_mono_s() if callable(wall_minus_mono_s) else wall_minus_mono_s
    return wt.clock(state, wmm)


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
        #: In the order first met (a dict: no reordering on every report).
        self._workers: dict[tuple[str, int, int], WorkerTrace] = {}

    def worker(self, hello: HelloData) -> WorkerTrace:
        key = _key(hello)
        wt = self._workers.get(key)
        if wt is None or (wt.hello is not hello and wt.hello != hello):
            self._workers.pop(key, None)  # a new process on the key: met anew
            wt = self._workers[key] = WorkerTrace(hello, self.local_host)
            if len(self._workers) > MAX_WORKERS:
                del self._workers[next(iter(self._workers))]
        return wt

    def known(self, hello: HelloData) -> WorkerTrace | None:
        return self._workers.get(_key(hello))

    def retain(self, hellos: Iterable[HelloData]) -> None:
        """Forget every worker not among ``hellos`` (those the registry still knows)."""
        keep = {_key(h) for h in hellos}
        for key in [k for k in self._workers if k not in keep]:
            del self._workers[key]

    def __len__(self) -> int:
        return len(self._workers)

    def on_report(
        self, state: WorkerState, report: ReportData, wall_minus_mono_s: WallMinusMono
    ) -> list[SpanDesc]:
        """Spans completed by ``report`` (call after the registry applied it).

        ``wall_minus_mono_s`` (or a function giving it) maps times to the wall
        clock; most reports trace nothing and never need it, so a function is
        called only when a span is made.
        """
        wt = self.worker(state.hello)
        out: list[SpanDesc] = []
        clock: WallClock | None = None
        sync = report.sync
        if sync is not None and sync.samples:
            samples = sync.samples
            if wt.traced:  # late collectives of steps traced already
                newest = max(rec.end_mono_ns for rec in wt.traced)
                for c in samples:
                    if c.start_mono_ns > newest or wt.has_collective(c):
                        continue
                    for rec in wt.traced:
                        if rec.span is not None and rec.holds(c.start_mono_ns):
                            clock = clock or _clock(wt, state, wall_minus_mono_s)
                            out.append(self._collective(wt, rec, c, clock))
                            break
            wt.add_collectives(samples)
        force = state.verdict is not Verdict.OK
        every = self.every_n_steps
        add_step = wt.history.append
        # Kept in locals over the loop (it runs for every step of every report).
        last, last_step = wt.last_end_mono_ns, wt.last_step
        for number, end_ns, dur_s in zip(
            report.recent_steps,
            report.recent_step_end_mono_ns,
            report.recent_step_s,
            strict=False,
        ):
            if last is not None and end_ns <= last:
                continue  # seen already (a report resent after a reconnect)
            # Steps never overlap, so a collective belongs to one step at most.
            if dur_s > 0:
                start_ns = end_ns - round(dur_s * 1e9)
                if last is not None and start_ns < last:
                    start_ns = last
            else:
                start_ns = last if last is not None else end_ns
            add_step((number, start_ns, end_ns, dur_s > 0))
            # A number seen already (a hook that counts no steps, or a client's
            # garbage) is not a new step: tracing each would flood the span queue.
            fresh = last_step is None or number > last_step
            last, last_step = end_ns, number
            if fresh and (force or number % every == 0):
                clock = clock or _clock(wt, state, wall_minus_mono_s)
                rec = StepRecord(number, start_ns, end_ns, dur_s > 0)
                out.extend(self._trace(wt, rec, clock, number % every == 0))
        wt.last_end_mono_ns, wt.last_step = last, last_step
        for phase in report.finished_phases:
            clock = clock or _clock(wt, state, wall_minus_mono_s)
            out.append(self._phase_span(wt, phase, clock))
        return out

    def trace_step(self, wt: WorkerTrace, rec: StepRecord, clock: WallClock) -> list[SpanDesc]:
        """Trace a remembered step now, with its collectives, if not yet traced."""
        if rec.span is not None:
            return []
        return self._trace(wt, rec, clock, sampled=False)

    def _trace(
        self, wt: WorkerTrace, rec: StepRecord, clock: WallClock, sampled: bool
    ) -> list[SpanDesc]:
        span = self._step_span(wt, rec, clock, sampled)
        rec.span = span.ref()
        wt.note_traced(rec)
        wt.keep(rec)
        out = [span]
        out.extend(self._collective(wt, rec, c, clock) for c in wt.collectives_in(rec))
        return out

    def _collective(
        self, wt: WorkerTrace, rec: StepRecord, c: CollectiveData, clock: WallClock
    ) -> SpanDesc:
        assert rec.span is not None
        return collective_span(wt.hello, wt.attrs, rec.span, c, rec.clock or clock)

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
