"""Hands the sidecar's folded histograms (:mod:`.histograms`) to OpenTelemetry readers.

The SDK has no asynchronous histogram instrument, so the folded histograms
join each collection at the reader: :class:`FoldingReader` (mixed into the
OTLP export timer's reader and the Prometheus reader) appends one
``Histogram`` metric per folded instrument to the ``MetricsData`` the SDK
collected, in the sidecar's instrumentation scope, before the reader exports
or serves it. Names, units, descriptions, attributes, bucket bounds and
temporality are those the SDK's own histograms had, so exporters, the
Prometheus names (``trainprobe_step_duration_seconds_bucket``...) and the
dashboards see no difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from trainprobe.sidecar.otel.histograms import FoldedHistogram
from trainprobe.sidecar.otel.measures import InstrumentSpec


class FoldedSet:
    """The folded histograms of one pipeline, by instrument."""

    def __init__(
        self, specs: Iterable[InstrumentSpec], resource: Resource, scope: InstrumentationScope
    ) -> None:
        self.specs = [s for s in specs if s.kind == "histogram"]
        self.by_name = {s.name: FoldedHistogram(s.buckets, s.attributes) for s in self.specs}
        self.resource = resource
        self.scope = scope

    def add_reader(self, reader: MetricReader) -> None:
        # The temporality the reader asked the SDK for (its exporter's preference),
        # keyed by the SDK's private subclass of Histogram.
        temporality = next(
            (
                t
                for cls, t in reader._instrument_class_temporality.items()
                if issubclass(cls, HistogramInstrument)
            ),
            AggregationTemporality.CUMULATIVE,
        )
        delta = temporality is AggregationTemporality.DELTA
        for hist in self.by_name.values():
            hist.add_reader(reader, delta)

    def metrics(self, reader: MetricReader) -> list[Metric]:
        out = []
        for spec in self.specs:
            hist = self.by_name[spec.name]
            points = hist.collect(reader)
            if not points:
                continue  # as the SDK: no metric without a point
            state = hist.is_delta(reader)
            out.append(
                Metric(
                    name=spec.name,
                    description=spec.description,
                    unit=spec.unit,
                    data=Histogram(
                        data_points=[
                            HistogramDataPoint(
                                attributes=p.attributes,
                                start_time_unix_nano=p.start_time_unix_nano,
                                time_unix_nano=p.time_unix_nano,
                                count=p.count,
                                sum=p.sum,
                                bucket_counts=p.bucket_counts,
                                explicit_bounds=p.explicit_bounds,
                                min=p.min,
                                max=p.max,
                                exemplars=[],
                            )
                            for p in points
                        ],
                        aggregation_temporality=AggregationTemporality.DELTA
                        if state
                        else AggregationTemporality.CUMULATIVE,
                    ),
                )
            )
        return out

    def merge(self, reader: MetricReader, data: MetricsData | None) -> MetricsData | None:
        """``data`` with the folded histograms added to the sidecar's scope."""
        extra = self.metrics(reader)
        if not extra:
            return data
        if data is None or not data.resource_metrics:
            return MetricsData(
                resource_metrics=[
                    ResourceMetrics(
                        resource=self.resource,
                        scope_metrics=[self._scope(extra)],
                        schema_url=self.resource.schema_url,
                    )
                ]
            )
        first, *rest = data.resource_metrics
        scopes: list[ScopeMetrics] = []
        placed = False
        for sm in first.scope_metrics:
            if not placed and sm.scope == self.scope:
                sm = ScopeMetrics(
                    scope=sm.scope, metrics=[*extra, *sm.metrics], schema_url=sm.schema_url
                )
                placed = True
            scopes.append(sm)
        if not placed:
            scopes.insert(0, self._scope(extra))
        merged = ResourceMetrics(
            resource=first.resource, scope_metrics=scopes, schema_url=first.schema_url
        )
        return MetricsData(resource_metrics=[merged, *rest])

    def _scope(self, metrics: Sequence[Metric]) -> ScopeMetrics:
        return ScopeMetrics(
            scope=self.scope, metrics=list(metrics), schema_url=self.scope.schema_url or ""
        )


_EMPTY = MetricsData(resource_metrics=[])


class FoldingReader(MetricReader):
    """Mix in before a concrete reader class; then call :meth:`fold_into`."""

    _folded: FoldedSet | None = None
    _sdk_collect: Any = None

    def fold_into(self, folded: FoldedSet) -> None:
        self._folded = folded
        folded.add_reader(self)

    # The SDK's collection callback, set by the MeterProvider. It returns None when
    # the SDK has no point at all (no worker known, no verdict given), and then
    # ``collect`` (final) skips ``_receive_metrics``: the folded histograms would
    # miss that collection. Wrapped, it returns an empty batch instead.
    @property
    def _collect(self) -> Any:
        inner = self._sdk_collect
        if inner is None or self._folded is None:
            return inner

        def collect(reader: MetricReader, timeout_millis: float = 10_000) -> MetricsData:
            data = inner(reader, timeout_millis=timeout_millis)
            return _EMPTY if data is None else data

        return collect

    @_collect.setter
    def _collect(self, func: Any) -> None:
        self._sdk_collect = func

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> None:
        folded = self._folded
        if folded is not None:
            metrics_data = folded.merge(self, metrics_data) or metrics_data
            if not metrics_data.resource_metrics:
                return  # nothing at all, as before folding: no empty export
        # The concrete reader mixed in after this class implements it.
        super()._receive_metrics(  # type: ignore[safe-super]
            metrics_data, timeout_millis=timeout_millis, **kwargs
        )
