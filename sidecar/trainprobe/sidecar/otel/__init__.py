"""OpenTelemetry traces and metrics built by the sidecar from its workers' reports.

The training process never creates a span: the sidecar builds them from the
reports it already receives. Layout:

- pure (no OpenTelemetry import, unit-tested on their own): :mod:`.ids`
  (deterministic trace/span ids), :mod:`.spans` (span descriptions),
  :mod:`.trace_builder` (step, collective and phase spans from reports) and
  :mod:`.worker_trace` (what it remembers of each worker),
  :mod:`.incident_spans` (incident, evidence and action spans),
  :mod:`.incident_attrs` (what they say as attributes),
  :mod:`.measures` (instruments and values), :mod:`.histograms` (histograms
  folded per report, read once per collection), :mod:`.resource_attrs`,
  :mod:`.config`, :mod:`.health`;
- adapters, imported only when exporters start: :mod:`.pipeline` (the SDK),
  :mod:`.folded_export` (the folded histograms into each reader's collection),
  :mod:`.jsonlines` (OTLP-JSON files, written by :mod:`.otlp_json`);
  :mod:`.telemetry` wires them to the sidecar.

Importing this package does not import OpenTelemetry.
"""

from trainprobe.sidecar.otel.config import TelemetryConfig, TelemetryError, telemetry_config
from trainprobe.sidecar.otel.health import ExportHealth
from trainprobe.sidecar.otel.ids import span_id, span_id_hex, step_trace_id, trace_id_hex
from trainprobe.sidecar.otel.incident_spans import (
    IncidentTracer,
    incident_attributes,
    incident_step,
)
from trainprobe.sidecar.otel.measures import (
    INSTRUMENTS,
    GaugeSnapshot,
    InstrumentSpec,
    gauge_snapshot,
)
from trainprobe.sidecar.otel.resource_attrs import SERVICE_NAME, resource_attributes
from trainprobe.sidecar.otel.spans import LinkDesc, SpanDesc, WallClock, worker_attributes
from trainprobe.sidecar.otel.telemetry import Telemetry, start_telemetry
from trainprobe.sidecar.otel.trace_builder import TraceBuilder

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
