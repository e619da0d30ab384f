"""OTLP/JSON straight from the SDK's data, for the JSON-lines exporters.

The library path (``encode_metrics``/``encode_spans`` to protobuf, then
protobuf's ``MessageToDict``, then ids rewritten to hex) walks every field by
reflection: at 1,000 workers one metrics collection took about 0.45 s of CPU
every 10 s, and each span about 80 µs, together about a sixth of the
sidecar's CPU (bench/HISTORY.md). This module builds the same documents
(the protobuf JSON mapping as :func:`~trainprobe.sidecar.otel.export.jsonlines.otlp_json`
writes it: lowerCamelCase keys, enums as integers, 64-bit integers as
strings, default scalars left out, ids as hex) with plain dicts.

It covers what the sidecar produces: sums, gauges and explicit-bucket
histograms without exemplars, spans without events. Anything else raises
:class:`Unsupported`, and the exporter falls back to the library path for
that batch. tests/test_otlp_json.py checks that both paths give the same
document.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import Gauge, Histogram, MetricsData, Sum
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

#: ``SpanFlags``: the context's is-remote bit is known (always), and is set.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_KIND = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}


class Unsupported(ValueError):
    """Data this encoder does not cover; use the library path instead."""


def _double(v: float) -> float | str:
    if math.isfinite(v):
        return float(v)
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"


def _value(v: Any) -> dict[str, Any]:
    if v is None:
        return {}
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": _double(v)}
    if isinstance(v, bytes):
        return {"bytesValue": base64.b64encode(v).decode()}
    if isinstance(v, Sequence):
        values = [_value(x) for x in v]
        return {"arrayValue": {"values": values} if values else {}}
    if isinstance(v, Mapping):
        kvs = [{"key": str(k), "value": _value(x)} for k, x in v.items()]
        return {"kvlistValue": {"values": kvs} if kvs else {}}
    raise Unsupported(f"attribute value of type {type(v).__name__}")


def _attributes(out: dict[str, Any], attributes: Mapping[str, Any] | None) -> None:
    if attributes:
        out["attributes"] = [{"key": k, "value": _value(v)} for k, v in attributes.items()]


def _put_ns(out: dict[str, Any], key: str, ns: int | None) -> None:
    if ns:
        out[key] = str(ns)


def _resource(resource: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _attributes(out, resource.attributes)
    return out


def _scope(scope: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if scope is None:
        return out
    if scope.name:
        out["name"] = scope.name
    if scope.version:
        out["version"] = scope.version
    _attributes(out, scope.attributes)
    return out


def _number_point(p: Any, with_start: bool) -> dict[str, Any]:
    if p.exemplars:
        raise Unsupported("exemplars")
    out: dict[str, Any] = {}
    _attributes(out, p.attributes)
    if with_start:
        _put_ns(out, "startTimeUnixNano", p.start_time_unix_nano)
    _put_ns(out, "timeUnixNano", p.time_unix_nano)
    v = p.value
    if isinstance(v, int):
        out["asInt"] = str(v)
    else:
        out["asDouble"] = _double(v)
    return out


def _histogram_point(p: Any) -> dict[str, Any]:
    if p.exemplars:
        raise Unsupported("exemplars")
    out: dict[str, Any] = {}
    _attributes(out, p.attributes)
    _put_ns(out, "startTimeUnixNano", p.start_time_unix_nano)
    _put_ns(out, "timeUnixNano", p.time_unix_nano)
    if p.count:
        out["count"] = str(p.count)
    if p.sum is not None:
        out["sum"] = _double(p.sum)
    if p.bucket_counts:
        out["bucketCounts"] = [str(c) for c in p.bucket_counts]
    if p.explicit_bounds:
        out["explicitBounds"] = [_double(b) for b in p.explicit_bounds]
    if p.min is not None:
        out["min"] = _double(p.min)
    if p.max is not None:
        out["max"] = _double(p.max)
    return out


def _metric(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": m.name}
    if m.description:
        out["description"] = m.description
    if m.unit:
        out["unit"] = m.unit
    data = m.data
    points = data.data_points
    if not points:
        return out  # the library sets the data only per point
    if isinstance(data, Histogram):
        body: dict[str, Any] = {"dataPoints": [_histogram_point(p) for p in points]}
        if data.aggregation_temporality:
            body["aggregationTemporality"] = int(data.aggregation_temporality)
        out["histogram"] = body
    elif isinstance(data, Sum):
        body = {"dataPoints": [_number_point(p, True) for p in points]}
        if data.aggregation_temporality:
            body["aggregationTemporality"] = int(data.aggregation_temporality)
        if data.is_monotonic:
            body["isMonotonic"] = True
        out["sum"] = body
    elif isinstance(data, Gauge):
        out["gauge"] = {"dataPoints": [_number_point(p, False) for p in points]}
    else:
        raise Unsupported(f"metric data {type(data).__name__}")
    return out


def metrics_document(data: MetricsData) -> dict[str, Any]:
    """The ``ExportMetricsServiceRequest`` of ``data`` as an OTLP/JSON object."""
    out = []
    seen = set()
    for rm in data.resource_metrics:
        if rm.resource in seen:
            raise Unsupported("one resource twice")  # the library merges them
        seen.add(rm.resource)
        scopes = []
        for sm in rm.scope_metrics:
            entry: dict[str, Any] = {"scope": _scope(sm.scope)}
            metrics = [_metric(m) for m in sm.metrics]
            if metrics:
                entry["metrics"] = metrics
            if sm.scope.schema_url:
                entry["schemaUrl"] = sm.scope.schema_url
            scopes.append(entry)
        res: dict[str, Any] = {"resource": _resource(rm.resource)}
        if scopes:
            res["scopeMetrics"] = scopes
        if rm.resource.schema_url:
            res["schemaUrl"] = rm.resource.schema_url
        out.append(res)
    return {"resourceMetrics": out} if out else {}


def _flags(context: Any) -> int:
    return _HAS_IS_REMOTE | (_IS_REMOTE if context is not None and context.is_remote else 0)


def _span(s: ReadableSpan) -> dict[str, Any]:
    if s.events:
        raise Unsupported("span events")
    ctx = s.get_span_context()
    assert ctx is not None  # a ReadableSpan always has one
    out: dict[str, Any] = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
    }
    state = ",".join(f"{k}={v}" for k, v in ctx.trace_state.items()) if ctx.trace_state else ""
    if state:
        out["traceState"] = state
    if s.parent is not None:
        out["parentSpanId"] = f"{s.parent.span_id:016x}"
    out["flags"] = _flags(s.parent)
    if s.name:
        out["name"] = s.name
    out["kind"] = _KIND[s.kind]
    _put_ns(out, "startTimeUnixNano", s.start_time)
    _put_ns(out, "endTimeUnixNano", s.end_time)
    _attributes(out, s.attributes)
    if s.dropped_attributes:
        out["droppedAttributesCount"] = s.dropped_attributes
    if s.dropped_events:
        out["droppedEventsCount"] = s.dropped_events
    if s.links:
        links = []
        for link in s.links:
            entry: dict[str, Any] = {
                "traceId": f"{link.context.trace_id:032x}",
                "spanId": f"{link.context.span_id:016x}",
            }
            _attributes(entry, link.attributes)
            if link.dropped_attributes:
                entry["droppedAttributesCount"] = link.dropped_attributes
            entry["flags"] = _flags(link.context)
            links.append(entry)
        out["links"] = links
    if s.dropped_links:
        out["droppedLinksCount"] = s.dropped_links
    status: dict[str, Any] = {}
    if s.status.description:
        status["message"] = s.status.description
    if s.status.status_code.value:
        status["code"] = s.status.status_code.value
    out["status"] = status
    return out


def spans_document(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The ``ExportTraceServiceRequest`` of ``spans`` as an OTLP/JSON object."""
    by_resource: dict[Any, dict[Any, list[dict[str, Any]]]] = {}
    for s in spans:
        scopes = by_resource.setdefault(s.resource, {})
        scopes.setdefault(s.instrumentation_scope or None, []).append(_span(s))
    out = []
    for resource, scopes in by_resource.items():
        entries = []
        for scope, encoded in scopes.items():
            entry: dict[str, Any] = {"scope": _scope(scope), "spans": encoded}
            if scope is not None and scope.schema_url:
                entry["schemaUrl"] = scope.schema_url
            entries.append(entry)
        res: dict[str, Any] = {"resource": _resource(resource), "scopeSpans": entries}
        if resource.schema_url:
            res["schemaUrl"] = resource.schema_url
        out.append(res)
    return {"resourceSpans": out} if out else {}
