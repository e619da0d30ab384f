"""Exporter wrappers that report each export's result to :class:`ExportHealth`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from trainprobe.sidecar.otel.export.health import ExportHealth


class GuardedSpanExporter(SpanExporter):
    """Reports every export's result to :class:`ExportHealth`."""

    def __init__(self, inner: SpanExporter, health: ExportHealth) -> None:
        self.inner = inner
        self.health = health

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as err:
            self.health.note(repr(err))
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.health.succeeded("spans", len(spans))
        else:
            self.health.failed("spans", len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _points(data: MetricsData) -> int:
    return sum(
        len(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    )


class GuardedMetricExporter(MetricExporter):
    """Reports every export's result to :class:`ExportHealth`."""

    def __init__(self, inner: MetricExporter, health: ExportHealth) -> None:
        super().__init__(inner._preferred_temporality, inner._preferred_aggregation)
        self.inner = inner
        self.health = health

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as err:
            self.health.note(repr(err))
            result = MetricExportResult.FAILURE
        if result is MetricExportResult.SUCCESS:
            self.health.succeeded("metric points", _points(metrics_data))
        else:
            self.health.failed("metric points", _points(metrics_data))
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)
