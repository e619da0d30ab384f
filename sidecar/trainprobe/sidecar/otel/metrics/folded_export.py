"""Hands the sidecar's folded histograms (:mod:`.histograms`) and its gauges to
OpenTelemetry readers.

The SDK has no asynchronous histogram instrument, so the folded histograms
join each collection at the reader: :class:`FoldingReader` (mixed into the
OTLP export timer's reader and the Prometheus reader) appends one
``Histogram`` metric per folded instrument to the ``MetricsData`` the SDK
collected, in the sidecar's instrumentation scope, before the reader exports
or serves it. Names, units, descriptions, attributes, bucket bounds and
temporality are those the SDK's own histograms had, so exporters, the
Prometheus names (``trainprobe_step_duration_seconds_bucket``...) and the
dashboards see no difference.

The gauges (and up-down counters) join the same way, built from one
:class:`~.measures.GaugeSnapshot` of the registry per collection, as the SDK's
observable instruments would report them: past 2,000 series an instrument,
the rest fold into one ``otel.metric.overflow=true`` series (the last value of
a gauge, the sum of an up-down counter). Through the SDK, each series kept an
aggregation (with its lock and exemplar reservoir) for as long as the process
lived, ~1.1 KiB a series, three to five a rank, also after the rank was gone;
and the 2,000 it kept were the first ever seen, so once 2,000 ranks had come
and gone every new rank was only in the overflow. Here a series costs nothing
between collections, and the 2,000 are those of the snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from trainprobe.sidecar.otel.metrics.histograms import (
    CARDINALITY_LIMIT,
    OVERFLOW_ATTRIBUTES,
    FoldedHistogram,
)
from trainprobe.sidecar.otel.metrics.measures import GaugeSnapshot, InstrumentSpec, Point

#: The instrument kinds whose values come from a registry snapshot at collection.
SNAPSHOT_KINDS = ("gauge", "updown")


class FoldedSet:
    """The folded histograms of one pipeline, by instrument, and its snapshot gauges."""

    def __init__(
        self,
        specs: Iterable[InstrumentSpec],
        resource: Resource,
        scope: InstrumentationScope,
        gauges: Callable[[], GaugeSnapshot] | None = None,
    ) -> None:
        specs = list(specs)
        self.specs = [s for s in specs if s.kind == "histogram"]
        self.by_name = {s.name: FoldedHistogram(s.buckets, s.attributes) for s in self.specs}
        self.gauge_specs = [s for s in specs if s.kind in SNAPSHOT_KINDS] if gauges else []
        self._gauges = gauges
        #: The start of the up-down counters' cumulative sums, as the SDK's
        #: observable instruments have it: when the instruments came to be.
        self._start_ns = time.time_ns()
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

    def gauge_metrics(self) -> list[Metric]:
        """Every gauge and up-down counter with a point, from one snapshot."""
        if self._gauges is None or not self.gauge_specs:
            return []
        snap = self._gauges()
        now = time.time_ns()
        out = []
        for spec in self.gauge_specs:
            values = _capped(snap.get(spec), spec.kind)
            if not values:
                continue  # as the SDK: no metric without a point
            if spec.kind == "gauge":
                data: Gauge | Sum = Gauge(
                    data_points=[
                        NumberDataPoint(dict(attrs), None, now, v, [])  # type: ignore[arg-type]
                        for v, attrs in values
                    ]
                )
            else:
                data = Sum(
                    data_points=[
                        NumberDataPoint(dict(attrs), self._start_ns, now, v, [])
                        for v, attrs in values
                    ],
                    aggregation_temporality=AggregationTemporality.CUMULATIVE,
                    is_monotonic=False,
                )
            out.append(
                Metric(name=spec.name, description=spec.description, unit=spec.unit, data=data)
            )
        return out

    def metrics(self, reader: MetricReader) -> list[Metric]:
        out = self.gauge_metrics()
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


def _capped(values: list[Point], kind: str) -> list[Point]:
    """The SDK's cardinality limit: the first 2,000 series, then one overflow."""
    if len(values) <= CARDINALITY_LIMIT:
        return values
    rest = [v for v, _ in values[CARDINALITY_LIMIT:]]
    over = rest[-1] if kind == "gauge" else sum(rest)
    return [*values[:CARDINALITY_LIMIT], (over, OVERFLOW_ATTRIBUTES)]


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
