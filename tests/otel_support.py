"""Test helpers for telemetry: a real OTLP/gRPC receiver and span flattening.

The receiver is opentelemetry-proto's own Trace/Metrics service, served by a
real gRPC server on 127.0.0.1 (port 0): exporters under test talk OTLP to it
exactly as they would to a collector.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attrs_of(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


@dataclass
class Span:
    """A received span, flattened for assertions."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: list[dict[str, Any]]
    status_code: int
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def flatten_spans(request: trace_service_pb2.ExportTraceServiceRequest) -> Iterator[Span]:
    for rs in request.resource_spans:
        resource = attrs_of(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield Span(
                    name=s.name,
                    trace_id=s.trace_id.hex(),
                    span_id=s.span_id.hex(),
                    parent_id=s.parent_span_id.hex(),
                    start_ns=s.start_time_unix_nano,
                    end_ns=s.end_time_unix_nano,
                    attributes=attrs_of(s.attributes),
                    links=[
                        {
                            "trace_id": link.trace_id.hex(),
                            "span_id": link.span_id.hex(),
                            "attributes": attrs_of(link.attributes),
                        }
                        for link in s.links
                    ],
                    status_code=s.status.code,
                    status_message=s.status.message,
                    resource=resource,
                )


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON's hex ids as protobuf's JSON mapping wants them (base64)."""
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId") and v
            else _hex_ids_to_base64(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids_to_base64(x) for x in node]
    return node


def file_spans(path: Path) -> list[Span]:
    """The spans of a sidecar's ``traces.otlp.jsonl`` so far (a line still being
    written is skipped)."""
    out: list[Span] = []
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        request = ParseDict(_hex_ids_to_base64(raw), trace_service_pb2.ExportTraceServiceRequest())
        out.extend(flatten_spans(request))
    return out


def metric_points(request: metrics_service_pb2.ExportMetricsServiceRequest) -> Iterator[tuple]:
    """(name, unit, attributes, value) per data point; histograms give (count, sum)."""
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                for p in getattr(m, kind).data_points:
                    if kind == "histogram":
                        value: Any = (p.count, p.sum)
                    else:
                        value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                    yield m.name, m.unit, attrs_of(p.attributes), value


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: OtlpReceiver) -> None:
        self.sink = sink

    def Export(self, request: Any, context: Any) -> Any:
        with self.sink.lock:
            self.sink.trace_requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, sink: OtlpReceiver) -> None:
        self.sink = sink

    def Export(self, request: Any, context: Any) -> Any:
        with self.sink.lock:
            self.sink.metric_requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class OtlpReceiver:
    """An OTLP/gRPC trace and metrics receiver on 127.0.0.1, for one test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.trace_requests: list[Any] = []
        self.metric_requests: list[Any] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(self), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[Span]:
        with self.lock:
            requests = list(self.trace_requests)
        return [s for r in requests for s in flatten_spans(r)]

    def points(self) -> list[tuple]:
        with self.lock:
            requests = list(self.metric_requests)
        return [p for r in requests for p in metric_points(r)]

    def __enter__(self) -> OtlpReceiver:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(grace=None).wait(5)
