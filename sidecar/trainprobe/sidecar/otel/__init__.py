"""OpenTelemetry traces and metrics built by the sidecar from its workers' reports.

The training process never creates a span: the sidecar builds them from the
reports it already receives. Layout, in the one direction imports run:

- ``traces/`` (pure: no OpenTelemetry import): deterministic ids, span
  descriptions, the builder of step, collective and phase spans from reports,
  what it remembers of each worker, and incident, evidence and action spans
  with their attributes;
- ``metrics/``: instruments and values, histograms folded per report and read
  once per collection (pure), the Prometheus families, and the adapter that
  hands the folded histograms to each reader's collection;
- ``export/``: what to export and where (``config``), the resource, export
  health and its guards, the SDK pipeline and the OTLP-JSON lines written
  when no collector is configured; the SDK is imported only when exporters
  start;
- :mod:`.telemetry` wires them to the sidecar.

Importing this package does not import OpenTelemetry.
"""

from trainprobe.sidecar.otel.export.config import TelemetryConfig, TelemetryError, telemetry_config
from trainprobe.sidecar.otel.export.health import ExportHealth
from trainprobe.sidecar.otel.export.resource_attrs import SERVICE_NAME, resource_attributes
from trainprobe.sidecar.otel.metrics.measures import (
    INSTRUMENTS,
    GaugeSnapshot,
    InstrumentSpec,
    gauge_snapshot,
)
from trainprobe.sidecar.otel.telemetry import Telemetry, start_telemetry
from trainprobe.sidecar.otel.traces.builder import TraceBuilder
from trainprobe.sidecar.otel.traces.ids import span_id, span_id_hex, step_trace_id, trace_id_hex
from trainprobe.sidecar.otel.traces.incident_spans import (
    IncidentTracer,
    incident_attributes,
    incident_step,
)
from trainprobe.sidecar.otel.traces.spans import LinkDesc, SpanDesc, WallClock, worker_attributes

__all__ = [
    "INSTRUMENTS",
    "SERVICE_NAME",
    "ExportHealth",
    "GaugeSnapshot",
    "IncidentTracer",
    "InstrumentSpec",
    "LinkDesc",
    "SpanDesc",
    "Telemetry",
    "TelemetryConfig",
    "TelemetryError",
    "TraceBuilder",
    "WallClock",
    "gauge_snapshot",
    "incident_attributes",
    "incident_step",
    "resource_attributes",
    "span_id",
    "span_id_hex",
    "start_telemetry",
    "step_trace_id",
    "telemetry_config",
    "trace_id_hex",
    "worker_attributes",
]
