"""The sidecar's folded histograms export what per-report SDK recording exported.

In process, no gRPC: one stream of reports goes (a) through
``Telemetry.on_report`` into the folded histograms, read by an
``InMemoryMetricReader`` (and a Prometheus reader) with the folding mixin,
and (b) into the SDK's own histograms, one ``Histogram.record`` per value with
the attributes the sidecar used before folding (the reference). Every
collection must hold the same points: names, units, attributes, counts,
bucket counts, min, max and sums (to rounding), cumulative and delta.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import deque
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry, generate_latest

from tests.otel_builders import MS, T0, hello, report
from trainprobe.sidecar.core.session.model import CollectiveData, SyncData, WorkerState
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.otel.metrics.folded_export import FoldedSet, FoldingReader
from trainprobe.sidecar.otel.metrics.measures import (
    ARRIVAL_LAG,
    INSTRUMENTS,
    STEP_DURATION,
    SYNC_DURATION,
    step_observations,
    sync_observations,
    worker_metric_attributes,
)
from trainprobe.sidecar.otel.telemetry import Telemetry

RESOURCE = Resource({"service.name": "trainprobe-sidecar"})
SCOPE = "trainprobe.sidecar"
HISTOGRAMS = [s for s in INSTRUMENTS if s.kind == "histogram"]
#: Values on bucket bounds, between them, above the last, and zero.
EDGES = (0.0, 0.0001, 0.001, 0.0025, 0.05, 0.1, 1.0, 2.5, 60.0, 100.0, 250.0)


class FoldingInMemory(FoldingReader, InMemoryMetricReader):
    pass


class FoldingPrometheus(FoldingReader, PrometheusMetricReader):
    pass


class StubPipeline:
    """What Telemetry needs of OtelPipeline: the folded histograms, no spans."""

    span_processor = None
    metrics = True

    def __init__(self, folded: FoldedSet) -> None:
        self.folded = folded

    def histogram(self, spec: Any) -> Any:
        return self.folded.by_name[spec.name]

    def emit(self, spans: Any) -> None:
        pass


class Reference:
    """The sidecar before folding: one SDK call per value, attributes as dicts."""

    def __init__(self, reader: Any) -> None:
        self.provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
        meter = self.provider.get_meter(SCOPE)
        self.hist = {
            s.name: meter.create_histogram(
                s.name,
                unit=s.unit,
                description=s.description,
                explicit_bucket_boundaries_advisory=list(s.buckets),
            )
            for s in HISTOGRAMS
        }

    def on_report(
        self, state: WorkerState, rep: Any, lags: list[tuple[WorkerState, str, float, bool]]
    ) -> None:
        attrs = worker_metric_attributes(state.hello)
        for seconds in step_observations(rep):
            self.hist[STEP_DURATION.name].record(seconds, attrs)
        for seconds, group, op in sync_observations(rep):
            self.hist[SYNC_DURATION.name].record(
                seconds,
                {**attrs, "trainprobe.collective.group": group, "trainprobe.collective.op": op},
            )
        for w, group, seconds, missed in lags:
            self.hist[ARRIVAL_LAG.name].record(
                seconds,
                {
                    **worker_metric_attributes(w.hello),
                    "trainprobe.collective.group": group,
                    "trainprobe.collective.missed": missed,
                },
            )


def points(data: Any) -> dict[tuple[str, frozenset[Any]], tuple[Any, ...]]:
    """Every histogram point, by metric name and attributes."""
    out = {}
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            assert sm.scope.name == SCOPE
            for m in sm.metrics:
                if not m.name.startswith("trainprobe.") or not hasattr(m.data, "data_points"):
                    continue
                if m.name not in {s.name for s in HISTOGRAMS}:
                    continue
                for p in m.data.data_points:
                    key = (m.name, frozenset(p.attributes.items()))
                    assert key not in out
                    out[key] = (
                        m.unit,
                        m.description,
                        m.data.aggregation_temporality,
                        p.count,
                        tuple(p.bucket_counts),
                        tuple(p.explicit_bounds),
                        p.min,
                        p.max,
                        round(p.sum, 9),
                    )
    return out


def stream(seed: int, rounds: int) -> list[tuple[int, Any, list[tuple[int, str, float, bool]]]]:
    """(rank, report, arrival lags as (rank, group, s, missed)) in arrival order."""
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        for rank in range(5):
            if rng.random() < 0.2:
                continue  # not every rank reports every round
            steps = [2 * r + 1, 2 * r + 2]
            rep = report(r + 1, steps, step_ms=rng.choice([0.5, 10, 50, 2500, 0]))
            samples = tuple(
                CollectiveData(
                    rng.choice(["dp", "tp"]),
                    100 * r + i,
                    rng.choice(["allreduce", "allgather"]),
                    4096,
                    T0 + i * MS,
                    T0 + i * MS + round(rng.choice(EDGES) * 1e9),
                    steps[0],
                )
                for i in range(rng.randint(0, 3))
            )
            if samples:
                rep = dataclasses.replace(rep, sync=SyncData(count=len(samples), samples=samples))
            lags = [
                (rng.randrange(5), "dp", rng.choice(EDGES), rng.random() < 0.3)
                for _ in range(rng.randint(0, 2))
            ]
            out.append((rank, rep, lags))
    return out


def run(temporality: AggregationTemporality, seed: int) -> None:
    pref: dict[type, AggregationTemporality] = {HistogramInstrument: temporality}
    folded = FoldedSet(INSTRUMENTS, RESOURCE, InstrumentationScope(SCOPE))
    mine = FoldingInMemory(preferred_temporality=pref)
    mine.fold_into(folded)
    provider = MeterProvider(resource=RESOURCE, metric_readers=[mine])
    provider.get_meter(SCOPE)
    theirs = InMemoryMetricReader(preferred_temporality=pref)
    ref = Reference(theirs)
    reg = Registry()
    states = [
        reg.open(dataclasses.replace(hello(rank=r, pid=100 + r), world_size=5), 1.0)
        for r in range(5)
    ]
    pending: deque[tuple[WorkerState, str, float, bool]] = deque()
    loop = asyncio.new_event_loop()
    try:
        tel = Telemetry(StubPipeline(folded), reg.workers, loop, lags=pending)  # type: ignore[arg-type]
        compared = 0
        for i, (rank, rep, lags) in enumerate(stream(seed, 40)):
            lagged = [(states[r], g, s, m) for r, g, s, m in lags]
            pending.extend(lagged)
            tel.on_report(states[rank], rep)
            ref.on_report(states[rank], rep, lagged)
            if i % 37 == 36:  # collect now and then, mid-stream
                want, got = points(theirs.get_metrics_data()), points(mine.get_metrics_data())
                assert got == want
                compared += len(want)
        assert points(mine.get_metrics_data()) == points(theirs.get_metrics_data())
        assert compared > 50
        assert tel.failures == {}
    finally:
        loop.close()
        provider.shutdown()
        ref.provider.shutdown()


@pytest.mark.parametrize("seed", [1, 2])
def test_folded_histograms_equal_per_report_recording_cumulative(seed: int) -> None:
    run(AggregationTemporality.CUMULATIVE, seed)


def test_folded_histograms_equal_per_report_recording_delta() -> None:
    run(AggregationTemporality.DELTA, 3)


def test_prometheus_scrape_is_the_same() -> None:
    folded = FoldedSet(INSTRUMENTS, RESOURCE, InstrumentationScope(SCOPE))
    mine_reg, theirs_reg = CollectorRegistry(), CollectorRegistry()
    mine = FoldingPrometheus(registry=mine_reg)
    mine.fold_into(folded)
    provider = MeterProvider(resource=RESOURCE, metric_readers=[mine])
    ref = Reference(PrometheusMetricReader(registry=theirs_reg))
    reg = Registry()
    states = [
        reg.open(dataclasses.replace(hello(rank=r, pid=100 + r), world_size=5), 1.0)
        for r in range(5)
    ]
    pending: deque[tuple[WorkerState, str, float, bool]] = deque()
    loop = asyncio.new_event_loop()
    try:
        tel = Telemetry(StubPipeline(folded), reg.workers, loop, lags=pending)  # type: ignore[arg-type]
        for rank, rep, lags in stream(4, 20):
            lagged = [(states[r], g, s, m) for r, g, s, m in lags]
            pending.extend(lagged)
            tel.on_report(states[rank], rep)
            ref.on_report(states[rank], rep, lagged)

        def lines(registry: CollectorRegistry) -> list[str]:
            text = generate_latest(registry).decode()
            return sorted(
                line
                for line in text.splitlines()
                if line.startswith(("trainprobe_", "# HELP trainprobe_", "# TYPE trainprobe_"))
                and "_created" not in line
            )

        got, want = lines(mine_reg), lines(theirs_reg)
        assert any(x.startswith("trainprobe_collective_arrival_lag_seconds_bucket") for x in want)
        assert any(x.startswith("trainprobe_sync_duration_seconds_bucket") for x in want)
        assert got == want
    finally:
        loop.close()
        provider.shutdown()
        ref.provider.shutdown()


GAUGES = [s for s in INSTRUMENTS if s.kind in ("gauge", "updown")]


def gauge_points(data: Any) -> dict[tuple[str, frozenset[Any]], tuple[Any, ...]]:
    """Every gauge and up-down counter point, by metric name and attributes."""
    out = {}
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name not in {s.name for s in GAUGES}:
                    continue
                kind = type(m.data).__name__
                extra = (
                    (m.data.aggregation_temporality, m.data.is_monotonic) if kind == "Sum" else ()
                )
                for p in m.data.data_points:
                    key = (m.name, frozenset(p.attributes.items()))
                    assert key not in out
                    out[key] = (m.unit, m.description, kind, *extra, p.value)
    return out


def snapshot_of(ranks: int, job: str = "jobA") -> Any:
    """A registry snapshot of ``ranks`` connected ranks, one with GPU memory."""
    from trainprobe.sidecar.core.session.model import GpuMemoryData
    from trainprobe.sidecar.core.session.overload import IngestLoad
    from trainprobe.sidecar.otel.metrics.measures import gauge_snapshot

    reg = Registry()
    for r in range(ranks):
        h = dataclasses.replace(hello(rank=r, pid=100 + r, job=job), world_size=ranks)
        st = reg.open(h, 1.0)
        rep = report(1, [1 + r % 3], step_ms=10)
        if r == 1:
            gpu = GpuMemoryData(0, 10, 20, 30, True, 40, 80, 5, "GPU-1")
            rep = dataclasses.replace(rep, gpu=gpu)
        reg.apply(st, rep, 2.0)
    return gauge_snapshot(reg.workers(), 3.0, IngestLoad(False, 10, 0, 0.25, 0.0))


@pytest.mark.parametrize("ranks", [5, 2500])
def test_snapshot_gauges_equal_the_sdks_observable_instruments(ranks: int) -> None:
    """The gauges built at collection are the points the SDK's observable gauges and
    up-down counters gave for the same snapshot, its cardinality limit included
    (2,000 series, then one overflow), with no state kept per series."""
    snap = snapshot_of(ranks)
    folded = FoldedSet(INSTRUMENTS, RESOURCE, InstrumentationScope(SCOPE), lambda: snap)
    mine = FoldingInMemory()
    mine.fold_into(folded)
    provider = MeterProvider(resource=RESOURCE, metric_readers=[mine])
    provider.get_meter(SCOPE)
    theirs = InMemoryMetricReader()
    ref = MeterProvider(resource=RESOURCE, metric_readers=[theirs])
    meter = ref.get_meter(SCOPE)

    def observe(spec: Any) -> Any:
        from opentelemetry.metrics import Observation

        return lambda options: [Observation(v, a) for v, a in snap.get(spec)]

    for spec in GAUGES:
        make = (
            meter.create_observable_gauge
            if spec.kind == "gauge"
            else meter.create_observable_up_down_counter
        )
        make(spec.name, [observe(spec)], unit=spec.unit, description=spec.description)
    try:
        got, want = gauge_points(mine.get_metrics_data()), gauge_points(theirs.get_metrics_data())
        heartbeats = {k for k in got if k[0] == "trainprobe.heartbeat.age"}
        assert len(heartbeats) == min(ranks, 2001)
        assert any(k[0] == "hw.gpu.memory.usage" for k in got)
        assert any(k[0] == "trainprobe.sidecar.overloaded" for k in got)
        assert got == want
    finally:
        provider.shutdown()
        ref.shutdown()


def test_ranks_that_came_after_2000_others_left_are_their_own_series() -> None:
    """The SDK kept the first 2,000 attribute sets it ever saw: once 2,000 ranks
    had come and gone, every new rank was folded into the overflow series. The
    snapshot's series are chosen anew at each collection."""
    first, later = snapshot_of(2000), snapshot_of(10, job="later")
    current = [first]
    folded = FoldedSet(INSTRUMENTS, RESOURCE, InstrumentationScope(SCOPE), lambda: current[0])
    mine = FoldingInMemory()
    mine.fold_into(folded)
    provider = MeterProvider(resource=RESOURCE, metric_readers=[mine])
    try:
        assert len(gauge_points(mine.get_metrics_data())) > 2000
        current[0] = later
        got = gauge_points(mine.get_metrics_data())
        ranks = {
            dict(k[1]).get("trainprobe.rank") for k in got if k[0] == "trainprobe.heartbeat.age"
        }
        assert ranks == set(range(10))
    finally:
        provider.shutdown()
