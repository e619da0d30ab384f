"""The direct OTLP/JSON encoder writes what the library path wrote.

The library path (``encode_metrics``/``encode_spans``, then protobuf's
``MessageToDict`` and ids as hex) is the reference: for every document the
sidecar writes, and for the corners of the mapping (64-bit integers as
strings, default scalars left out, non-finite doubles, every attribute type,
remote parents, links, error status), both must parse to the same object.
What the direct encoder does not cover (span events, exemplars) falls back to
the library path, so the lines stay the same.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from trainprobe.sidecar.otel.export.jsonlines import (
    JsonLinesMetricExporter,
    JsonLinesSpanExporter,
    metrics_line,
    otlp_json,
    spans_line,
)
from trainprobe.sidecar.otel.export.otlp_json import Unsupported, metrics_document, spans_document

ATTRS = {
    "s": "text",
    "empty": "",
    "i": 7,
    "zero": 0,
    "neg": -(2**62),
    "f": 0.25,
    "b": True,
    "nb": False,
    "seq_s": ("a", "b"),
    "seq_i": (1, 2),
    "seq_f": (0.5, 1.5),
    "seq_empty": (),
    "inf": math.inf,
    "ninf": -math.inf,
    "nan": math.nan,
}
RESOURCE = Resource({"service.name": "trainprobe-sidecar", "host.name": "n1", "pid": 4})
SCOPE = InstrumentationScope("trainprobe.sidecar", "9.9")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _library_metrics(data: object) -> object:
    return json.loads(otlp_json(encode_metrics(data)))  # type: ignore[arg-type]


def _metrics_data(temporality: AggregationTemporality) -> object:
    reader = InMemoryMetricReader(
        preferred_temporality={kind: temporality for kind in (Counter, Histogram, UpDownCounter)}
    )
    view = View(
        instrument_name="h_bounds",
        aggregation=ExplicitBucketHistogramAggregation((0.001, 1, 10, 100)),
    )
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader], views=[view])
    meter = provider.get_meter(SCOPE.name, SCOPE.version)
    ints = meter.create_counter("c_int", unit="{x}", description="ints")
    floats = meter.create_counter("c_float", unit="s")
    updown = meter.create_up_down_counter("ud")
    hist = meter.create_histogram("h_bounds", unit="s", description="bounded")
    hist_default = meter.create_histogram("h_default")
    ints.add(3, ATTRS)
    ints.add(0, {"only": "zero"})
    floats.add(0.0)
    floats.add(2.5, {"k": "v"})
    updown.add(-4, {"r": 1})
    for v in (0.0, 0.001, 0.5, 1, 99.0, 1e6):
        hist.record(v, {"rank": 3, "job": "j"})
    hist_default.record(42, {})

    def gauge(options: CallbackOptions) -> list[Observation]:
        return [
            Observation(1.5, {"rank": 0}),
            Observation(0, {"rank": 1}),
            Observation(-(2**40), {"rank": 2}),
            Observation(math.inf, {"rank": 3}),
            Observation(math.nan, {"rank": 4}),
            Observation(0.0, ATTRS),
        ]

    meter.create_observable_gauge("g", [gauge], unit="By")
    meter.create_observable_gauge("g_empty", [lambda options: []])
    first = reader.get_metrics_data()
    hist.record(7.0, {"rank": 3, "job": "j"})
    second = reader.get_metrics_data()  # delta: new counts only; cumulative: all
    provider.shutdown()
    return first, second


@pytest.mark.parametrize("temporality", list(AggregationTemporality)[1:])
def test_metrics_documents_match_the_library(temporality: AggregationTemporality) -> None:
    for data in _metrics_data(temporality):
        assert data is not None
        ours = json.loads(json.dumps(metrics_document(data)))
        assert ours == _library_metrics(data)
        assert json.loads(metrics_line(data)) == ours


def test_an_empty_histogram_point_matches_the_library() -> None:
    # Nothing recorded in the window: count 0 and the SDK's empty min and max
    # (infinite), which the SDK's own readers never hand over but a reader may.
    point = HistogramDataPoint(
        attributes={"rank": 1},
        start_time_unix_nano=0,
        time_unix_nano=5,
        count=0,
        sum=0,
        bucket_counts=[0, 0],
        explicit_bounds=[1.0],
        min=math.inf,
        max=-math.inf,
    )
    metric = Metric("h", "", "", HistogramData([point], AggregationTemporality.DELTA))
    data = MetricsData([ResourceMetrics(RESOURCE, [ScopeMetrics(SCOPE, [metric], "")], "")])
    assert json.loads(json.dumps(metrics_document(data))) == _library_metrics(data)


def _ctx(trace_id: int, span_id: int, remote: bool = False, state: TraceState | None = None):
    return SpanContext(trace_id, span_id, remote, _SAMPLED, state)


def _spans() -> list[ReadableSpan]:
    other = Resource({"service.name": "other"})
    common = {"resource": RESOURCE, "instrumentation_scope": SCOPE}
    return [
        ReadableSpan(
            name="step",
            context=_ctx(2**127 + 5, 2**63 + 1),
            attributes=ATTRS,
            kind=SpanKind.INTERNAL,
            status=Status(StatusCode.UNSET),
            start_time=1_700_000_000_000_000_001,
            end_time=1_700_000_000_000_000_999,
            **common,
        ),
        ReadableSpan(
            name="collective",
            context=_ctx(1, 2, state=TraceState([("k", "v"), ("a", "b")])),
            parent=_ctx(1, 3),
            links=[
                Link(_ctx(9, 10), {"why": "same step"}),
                Link(_ctx(11, 12, remote=True)),
            ],
            kind=SpanKind.CLIENT,
            status=Status(StatusCode.ERROR, "rank 3 never entered"),
            start_time=10,
            end_time=20,
            **common,
        ),
        ReadableSpan(
            name="remote child",
            context=_ctx(1, 4),
            parent=_ctx(1, 3, remote=True),
            status=Status(StatusCode.OK),
            start_time=0,
            end_time=0,
            resource=other,
            instrumentation_scope=InstrumentationScope("x"),
        ),
        ReadableSpan(name="no scope", context=_ctx(3, 3), resource=other),
    ]


def test_span_documents_match_the_library() -> None:
    spans = _spans()
    ours = json.loads(json.dumps(spans_document(spans)))
    assert ours == json.loads(otlp_json(encode_spans(spans)))
    assert ours["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] == f"{2**127 + 5:032x}"
    assert spans_document([]) == json.loads(otlp_json(encode_spans([]))) == {}


def test_what_it_does_not_cover_falls_back_to_the_library_path(tmp_path: Path) -> None:
    with_event = ReadableSpan(
        name="e",
        context=_ctx(1, 1),
        events=[Event("boom", {"a": 1}, timestamp=5)],
        resource=RESOURCE,
    )
    with pytest.raises(Unsupported):
        spans_document([with_event])
    assert json.loads(spans_line([with_event])) == json.loads(otlp_json(encode_spans([with_event])))
    exporter = JsonLinesSpanExporter(tmp_path / "t.jsonl")
    exporter.export([with_event, *_spans()])
    (line,) = (tmp_path / "t.jsonl").read_text().splitlines()
    assert json.loads(line) == json.loads(otlp_json(encode_spans([with_event, *_spans()])))


def test_the_metrics_exporter_writes_the_direct_document(tmp_path: Path) -> None:
    exporter = JsonLinesMetricExporter(tmp_path / "m.jsonl")
    first, second = _metrics_data(AggregationTemporality.CUMULATIVE)  # type: ignore[misc]
    exporter.export(first)
    exporter.export(second)
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [_library_metrics(first), _library_metrics(second)]
