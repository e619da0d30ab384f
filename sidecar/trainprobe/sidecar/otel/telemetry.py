"""The sidecar's telemetry: a report listener, an incident sink and an action
listener that feed the OpenTelemetry pipeline.

Everything here runs on the sidecar's loop and only computes and enqueues:
span descriptions go to the SDK's bounded batch queue, histogram values into
the folded histograms (plain Python, :mod:`.histograms`), counts into the
SDK's in-memory aggregation. Exports happen on the SDK's threads, so a slow
or dead collector never delays a tick, a kill or the incident log.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.job.view import EpisodeNote
from trainprobe.sidecar.core.session.model import ReportData, WorkerState
from trainprobe.sidecar.core.session.overload import IngestLoad
from trainprobe.sidecar.otel.export.config import TelemetryConfig, TelemetryError, telemetry_config
from trainprobe.sidecar.otel.export.resource_attrs import resource_attributes
from trainprobe.sidecar.otel.metrics.measures import (
    ACTIONS,
    ARRIVAL_LAG,
    STEP_DURATION,
    SYNC_DURATION,
    VERDICTS,
    GaugeSnapshot,
    JobSyncLoad,
    action_count,
    gauge_snapshot,
    sync_observations,
    verdict_count,
)
from trainprobe.sidecar.otel.traces.builder import TraceBuilder
from trainprobe.sidecar.otel.traces.incident_spans import IncidentTracer
from trainprobe.sidecar.otel.traces.job_episodes import JobEpisodeSpans

if TYPE_CHECKING:
    from trainprobe.sidecar.otel.export.pipeline import OtelPipeline

log = logging.getLogger("trainprobe.sidecar")
#: How long a metrics reader waits for the loop to snapshot the registry.
GAUGE_WAIT_S = 1.0
#: Every this many reports, the trace builder forgets the workers that ended
#: cleanly or that the registry forgot.
PRUNE_EVERY_REPORTS = 4096
#: How often a summary-mode upstream reads its jobs' episodes (one span each):
#: a node holds its note there one sync at least (job_sync_interval_ms, 500 ms
#: by default), so a poll a fifth of that sees even a note sent once; with no
#: job at the hub (every other sidecar), once a second.
HUB_POLL_S = 0.1
HUB_IDLE_S = 1.0


class Telemetry:
    """Feeds one :class:`~trainprobe.sidecar.otel.export.pipeline.OtelPipeline`.

    Register :meth:`on_report` as a report listener, the object itself as an
    engine sink and :meth:`on_action` as an action listener.
    """

    def __init__(
        self,
        pipeline: OtelPipeline,
        workers: Callable[[], Iterable[WorkerState]],
        loop: asyncio.AbstractEventLoop,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        every_n_steps: int = 100,
        lags: deque[tuple[WorkerState, str, float, bool]] | None = None,
    ) -> None:
        self.pipeline = pipeline
        #: Arrival lags as the registry's comparisons close (drained here).
        self._lags = lags
        self._workers = workers
        #: The sidecar's own load at a time (set by the server; None: not exported).
        self.ingest: Callable[[float], IngestLoad] | None = None
        #: Summary mode's link and hub (set by the server; None: not exported).
        self.job_sync: Callable[[], JobSyncLoad] | None = None
        self._loop = loop
        self._clock = clock
        self._wall = wall_clock
        self.tracing = pipeline.span_processor is not None
        self.builder = TraceBuilder(every_n_steps, local_host=socket.gethostname())
        self.incidents = IncidentTracer(self.builder)
        self.failures: dict[str, int] = {}
        self._reports = 0
        if pipeline.metrics:
            self._steps = pipeline.histogram(STEP_DURATION)
            self._syncs = pipeline.histogram(SYNC_DURATION)
            self._arrival = pipeline.histogram(ARRIVAL_LAG)

    def _wall_minus_mono(self) -> float:
        return self._wall() - self._clock()

    def _failed(self, what: str) -> None:
        n = self.failures[what] = self.failures.get(what, 0) + 1
        if n == 1:  # say it once; a bug here must not flood the log per report
            log.exception("telemetry: building %s failed; detection is unaffected", what)

    def prune(self) -> None:
        """Forget the trace state of workers that said Goodbye (they need no
        incident spans any more) or that the registry forgot: every
        :data:`PRUNE_EVERY_REPORTS` reports, and after streams end (a wave of
        Goodbyes with no reports after it left ~5 KiB a worker behind)."""
        try:
            self.builder.retain(w.hello for w in self._workers() if w.ended != "goodbye")
        except Exception:
            self._failed("pruning trace state")

    def on_report(self, state: WorkerState, report: ReportData) -> None:
        try:
            self._reports += 1
            if self._reports % PRUNE_EVERY_REPORTS == 0:
                self.prune()
            if self.tracing:
                spans = self.builder.on_report(state, report, self._wall_minus_mono)
                if spans:
                    self.pipeline.emit(spans)
            if not self.pipeline.metrics:
                return
            # Keys in the order of each spec's attribute names (measures.py).
            hello = state.hello
            job, rank = hello.job_id, hello.rank
            # The report's step times as they are: a 0 is a step the hook did not
            # count (measures.step_observations), which positive= drops.
            self._steps.record((job, rank), report.recent_step_s, positive=True)
            if report.sync is not None and report.sync.samples:
                for seconds, group, op in sync_observations(report):
                    self._syncs.record((job, rank, group, op), (seconds,))
            lags = self._lags
            while lags:
                w, group, seconds, missed = lags.popleft()
                self._arrival.record((w.hello.job_id, w.hello.rank, group, missed), (seconds,))
        except Exception:
            self._failed("report spans and metrics")

    def on_incident(self, incident: Incident) -> None:
        try:
            if self.pipeline.metrics:
                count, attrs = verdict_count(incident)
                self.pipeline.add(VERDICTS, count, attrs)
            if self.tracing:
                states = {w.key: w for w in self._workers() if w.hello.job_id == incident.job_id}
                self.pipeline.emit(
                    self.incidents.on_incident(incident, states, self._wall_minus_mono())
                )
        except Exception:
            self._failed("incident spans")

    def on_action(self, incident: Incident, record: Mapping[str, object]) -> None:
        try:
            if self.pipeline.metrics:
                self.pipeline.add(ACTIONS, 1, action_count(incident, record))
            if self.tracing:
                span = self.incidents.action_span(
                    incident, record, self._clock(), self._wall_minus_mono()
                )
                if span is not None:
                    self.pipeline.emit([span])
        except Exception:
            self._failed("action spans")

    async def trace_job_episodes(
        self,
        episodes: Callable[[], Mapping[str, EpisodeNote | None]],
        stop: asyncio.Event,
        closed: Callable[[], list[tuple[str, EpisodeNote]]] = list,
    ) -> None:
        """A summary-mode upstream's job episodes as spans (traces/job_episodes.py):
        ``episodes()`` (every job at the hub, with its episode or None) and
        ``closed()`` (the closed notes received since, taken) are read on the
        loop that feeds the hub, so between two of its messages; on ``stop``
        the episodes still open end."""
        spans = JobEpisodeSpans()
        every_s = HUB_IDLE_S
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            try:
                now, wmm = self._clock(), self._wall_minus_mono()
                if stop.is_set():
                    done = spans.close_all(now, wmm, "upstream stopped")
                else:
                    seen = episodes()
                    every_s = HUB_POLL_S if seen else HUB_IDLE_S
                    done = spans.poll(seen, now, wmm, closed())
                if done:
                    self.pipeline.emit(done)
            except Exception:
                self._failed("job episode spans")

    def gauges(self) -> GaugeSnapshot:
        """A registry snapshot, taken on the loop (called from reader threads)."""

        def take() -> GaugeSnapshot:
            now = self._clock()
            ingest = self.ingest(now) if self.ingest else None
            sync = self.job_sync() if self.job_sync else None
            return gauge_snapshot(self._workers(), now, ingest, sync)

        try:
            if asyncio.get_running_loop() is self._loop:
                return take()
        except RuntimeError:
            pass
        fut: concurrent.futures.Future[GaugeSnapshot] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(take())
            except BaseException as err:
                fut.set_exception(err)

        try:
            self._loop.call_soon_threadsafe(run)
            return fut.result(timeout=GAUGE_WAIT_S)
        except (RuntimeError, concurrent.futures.TimeoutError):
            return GaugeSnapshot()  # the loop is closed or busy: skip this collection

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Flush and stop the exporters without blocking the loop."""
        await asyncio.to_thread(self.pipeline.shutdown, timeout_s)


def start_telemetry(
    settings: Any,
    workers: Callable[[], Iterable[WorkerState]],
    clock: Callable[[], float] = time.monotonic,
    version: str = "",
    env: Mapping[str, str] | None = None,
    lags: deque[tuple[WorkerState, str, float, bool]] | None = None,
) -> Telemetry | None:
    """Start the exporters the settings ask for, on the running loop.

    Returns None when telemetry is off, or when it is on by default but
    OpenTelemetry is not installed (one warning). Raises
    :class:`TelemetryError` when an explicitly requested endpoint or port
    cannot work.
    """
    cfg: TelemetryConfig = telemetry_config(settings, os.environ if env is None else env)
    if not cfg.enabled:
        return None
    try:
        from trainprobe.sidecar.otel.export.pipeline import OtelPipeline
    except ImportError as err:
        if cfg.explicit:
            raise TelemetryError(
                "otlp_endpoint/metrics_port need the OpenTelemetry exporters "
                "(opentelemetry-exporter-otlp-proto-grpc, opentelemetry-exporter-prometheus): "
                f"{err}"
            ) from None
        log.warning("telemetry off: OpenTelemetry is not installed (%s)", err)
        return None
    loop = asyncio.get_running_loop()
    telemetry: Telemetry | None = None
    try:
        pipeline = OtelPipeline(
            cfg,
            resource_attributes(os.environ if env is None else env, socket.gethostname(), version),
            lambda: telemetry.gauges() if telemetry is not None else GaugeSnapshot(),
            version,
        )
    except TelemetryError:
        raise
    except Exception as err:  # e.g. a bad OTEL_EXPORTER_OTLP_* value the SDK rejects
        raise TelemetryError(f"cannot start telemetry: {err}") from None
    telemetry = Telemetry(
        pipeline,
        workers,
        loop,
        clock=clock,
        every_n_steps=cfg.trace_every_n_steps,
        lags=lags,
    )
    parts = []
    if cfg.traces or cfg.otlp_metrics:
        what = " and ".join(
            n for n, on in (("traces", cfg.traces), ("metrics", cfg.otlp_metrics)) if on
        )
        parts.append(f"{what} to {cfg.destination}")
    if pipeline.metrics_port is not None:
        parts.append(f"Prometheus on http://{cfg.prometheus_host}:{pipeline.metrics_port}/metrics")
    log.info("telemetry: %s", "; ".join(parts))
    return telemetry
