"""OTLP-JSON lines: the default exporters when no collector is configured.

Each line is one ``ExportTraceServiceRequest`` (or metrics request) in the
OTLP/JSON encoding: protobuf's JSON mapping with lowerCamelCase keys, enums as
integers, and trace/span ids as hex strings (not protobuf's base64). That is
what the OpenTelemetry Collector's ``otlpjsonfile`` receiver reads; see
docs/OBSERVABILITY.md.

The official ``opentelemetry-exporter-otlp-json-file`` package would do this,
but its only release pins ``opentelemetry-exporter-otlp-common==0.66b1`` while
the gRPC exporter we need pins 0.66b2, so the two cannot be installed together.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from trainprobe.sidecar.otel.export.otlp_json import Unsupported, metrics_document, spans_document

#: A file is rotated to ``<name>.1`` when it reaches this size.
MAX_FILE_BYTES = 64 << 20
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids(node: Any) -> Any:
    """Rewrite protobuf's base64 ids into the hex that OTLP/JSON requires, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


def otlp_json(message: Any) -> str:
    """One OTLP/JSON line (without the newline) for an OTLP protobuf message.

    The library path: the exporters use it for what :mod:`.otlp_json` does not cover.
    """
    data = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hex_ids(data), separators=(",", ":"))


def spans_line(spans: Sequence[ReadableSpan]) -> str:
    try:
        return json.dumps(spans_document(spans), separators=(",", ":"))
    except Unsupported:
        return otlp_json(encode_spans(spans))


def metrics_line(data: MetricsData) -> str:
    try:
        return json.dumps(metrics_document(data), separators=(",", ":"))
    except Unsupported:
        return otlp_json(encode_metrics(data))


class JsonLinesFile:
    """Appends lines to a file, rotating it at ``max_bytes``. Thread-safe."""

    def __init__(self, path: Path, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def append(self, line: str) -> None:
        """Raises OSError if the line cannot be written."""
        data = (line + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(data) > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


class JsonLinesSpanExporter(SpanExporter):
    """Writes each batch of spans as one OTLP/JSON line."""

    def __init__(self, path: Path) -> None:
        self.file = JsonLinesFile(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self.file.append(spans_line(spans))
        except (OSError, ValueError):
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class JsonLinesMetricExporter(MetricExporter):
    """Writes each collection as one OTLP/JSON line (cumulative temporality)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.file = JsonLinesFile(path)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            self.file.append(metrics_line(metrics_data))
        except (OSError, ValueError):
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass
