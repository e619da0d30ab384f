"""The OpenTelemetry SDK adapter: span descriptions and measurements in, OTLP out.

The only module (with :mod:`jsonlines`) that imports OpenTelemetry; it is
imported only when the sidecar starts its exporters. Everything here is
non-blocking for the caller: spans go into the SDK's bounded batch queue
(``OTEL_BSP_MAX_QUEUE_SIZE``, default 2048; the oldest are dropped when it is
full), metrics are aggregated in memory and exported by the SDK's own
threads. A dead collector therefore costs the queue and one log line.

Spans are built as ``ReadableSpan`` objects and handed to the batch processor
directly, not through a ``Tracer``: their ids are deterministic (see
:mod:`ids`) and their times are the workers', both of which a ``Tracer``
would choose for itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from trainprobe.sidecar.otel.export.config import TelemetryConfig, TelemetryError
from trainprobe.sidecar.otel.export.guards import GuardedMetricExporter, GuardedSpanExporter
from trainprobe.sidecar.otel.export.health import ExportHealth, QuietSdkLogs
from trainprobe.sidecar.otel.export.jsonlines import JsonLinesMetricExporter, JsonLinesSpanExporter
from trainprobe.sidecar.otel.metrics.folded_export import FoldedSet, FoldingReader
from trainprobe.sidecar.otel.metrics.histograms import FoldedHistogram
from trainprobe.sidecar.otel.metrics.measures import INSTRUMENTS, GaugeSnapshot, InstrumentSpec
from trainprobe.sidecar.otel.traces.spans import AttrValue, SpanDesc

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


class _PeriodicReader(FoldingReader, PeriodicExportingMetricReader):
    pass


class OtelPipeline:
    """Providers, processors, exporters and instruments for one sidecar."""

    def __init__(
        self,
        cfg: TelemetryConfig,
        resource_attributes: Mapping[str, str],
        gauges: Callable[[], GaugeSnapshot],
        version: str,
    ) -> None:
        self.cfg = cfg
        self.health = ExportHealth(
            cfg.destination,
            "what does not fit the bounded export queues is dropped",
        )
        self._quiet = QuietSdkLogs(self.health)
        self.resource = Resource(dict(resource_attributes)).merge(OTELResourceDetector().detect())
        self._scope = InstrumentationScope("trainprobe.sidecar", version)
        self._span_exporter: SpanExporter | None = None
        self._metric_exporter: MetricExporter | None = None
        self.span_processor: BatchSpanProcessor | None = None
        self.http_server: Any = None
        #: Histograms are folded here per report and join each reader's collection,
        #: as do the gauges, from one registry snapshot a collection.
        self.folded = FoldedSet(INSTRUMENTS, self.resource, self._scope, gauges)
        self._quiet.install()
        try:
            # The only step that can fail (a busy port) comes first, before any
            # exporter thread exists.
            readers = self._prometheus_readers()
        except BaseException:
            self._quiet.remove()
            raise
        readers += self._otlp_readers()
        for reader in readers:
            reader.fold_into(self.folded)
        #: Whether anything reads the metrics (recording is skipped otherwise).
        self.metrics = bool(readers)
        self._start_traces()
        self.meter_provider = MeterProvider(
            resource=self.resource, metric_readers=readers, shutdown_on_exit=False
        )
        meter = self.meter_provider.get_meter("trainprobe.sidecar", version)
        self._counters: dict[str, Any] = {}
        for spec in INSTRUMENTS:
            # Histograms and gauges are folded in at each collection (FoldedSet):
            # only the counters are the SDK's.
            if spec.kind == "counter":
                self._counters[spec.name] = meter.create_counter(
                    spec.name, unit=spec.unit, description=spec.description
                )

    # -- construction -----------------------------------------------------------

    def _start_traces(self) -> None:
        if not self.cfg.traces:
            return
        if self.cfg.otlp:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter: SpanExporter = OTLPSpanExporter(endpoint=self.cfg.endpoint)
        else:
            exporter = JsonLinesSpanExporter(self.cfg.traces_file)
        self._span_exporter = exporter
        self.span_processor = BatchSpanProcessor(
            GuardedSpanExporter(exporter, self.health),
            schedule_delay_millis=self.cfg.span_delay_ms,
        )

    def _otlp_readers(self) -> list[FoldingReader]:
        if not self.cfg.otlp_metrics:
            return []
        if self.cfg.otlp:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

            exporter: MetricExporter = OTLPMetricExporter(endpoint=self.cfg.endpoint)
        else:
            exporter = JsonLinesMetricExporter(self.cfg.metrics_file)
        self._metric_exporter = exporter
        return [
            _PeriodicReader(
                GuardedMetricExporter(exporter, self.health),
                export_interval_millis=self.cfg.metric_interval_ms,
            )
        ]

    def _prometheus_readers(self) -> list[FoldingReader]:
        if self.cfg.prometheus_port is None:
            return []
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        from trainprobe.sidecar.otel.metrics.prom_families import FamiliesRegistry

        class PrometheusReader(FoldingReader, PrometheusMetricReader):
            pass

        # A private registry (two sidecars in one process must not collide) that
        # serves every family from the first scrape, before any data point.
        registry = FamiliesRegistry(INSTRUMENTS)
        host, port = self.cfg.prometheus_host, self.cfg.prometheus_port
        try:
            self.http_server, _ = start_http_server(port, addr=host, registry=registry)
        except OSError as err:
            raise TelemetryError(
                f"metrics_port: cannot serve metrics on {host}:{port}: {err.strerror or err}"
            ) from None
        return [PrometheusReader(registry=registry)]

    @property
    def metrics_port(self) -> int | None:
        """The bound Prometheus port (useful with ``metrics_port=0``)."""
        return self.http_server.server_port if self.http_server is not None else None

    # -- spans --------------------------------------------------------------------

    def _readable(self, d: SpanDesc) -> ReadableSpan:
        parent = SpanContext(d.trace_id, d.parent_id, False, _SAMPLED) if d.parent_id else None
        return ReadableSpan(
            name=d.name,
            context=SpanContext(d.trace_id, d.span_id, False, _SAMPLED),
            parent=parent,
            resource=self.resource,
            attributes=d.attributes,
            links=[
                Link(SpanContext(link.trace_id, link.span_id, False, _SAMPLED), link.attributes)
                for link in d.links
            ],
            kind=SpanKind.INTERNAL,
            status=Status(StatusCode.ERROR, d.error) if d.error else _UNSET,
            start_time=d.start_ns,
            end_time=d.end_ns,
            instrumentation_scope=self._scope,
        )

    def emit(self, spans: Iterable[SpanDesc]) -> None:
        """Queue closed spans for export; never blocks."""
        processor = self.span_processor
        if processor is None:
            return
        for d in spans:
            processor.on_end(self._readable(d))

    # -- metrics ------------------------------------------------------------------

    def histogram(self, spec: InstrumentSpec) -> FoldedHistogram:
        """Where ``spec``'s values go: ``.record(key, values)``, no SDK call."""
        return self.folded.by_name[spec.name]

    def add(self, spec: InstrumentSpec, value: int, attrs: Mapping[str, AttrValue]) -> None:
        self._counters[spec.name].add(value, attrs)

    # -- shutdown -----------------------------------------------------------------

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush what the collector takes within about ``timeout_s``; drop the rest."""
        if self.health.failing:
            self._abort_exports()  # do not wait for a collector known to be down
        worker = threading.Thread(
            target=self._shutdown_providers,
            args=(timeout_s,),
            name="trainprobe-otel-shutdown",
            daemon=True,
        )
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            # A collector that went silent: end its retries, then give up waiting.
            self._abort_exports()
            worker.join(1.0)
        if self.http_server is not None:
            self.http_server.shutdown()
            self.http_server.server_close()
        self._quiet.remove()

    def _abort_exports(self) -> None:
        for exporter in (self._span_exporter, self._metric_exporter):
            if exporter is not None:
                try:
                    exporter.shutdown()
                except Exception as err:
                    self.health.note(repr(err))

    def _shutdown_providers(self, timeout_s: float) -> None:
        if self.span_processor is not None:
            self.span_processor.shutdown()
        self.meter_provider.shutdown(timeout_millis=timeout_s * 1000)
