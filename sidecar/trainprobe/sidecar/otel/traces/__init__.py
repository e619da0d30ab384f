"""Span descriptions as plain data, built from reports and incidents.

``ids`` (deterministic trace and span ids), ``spans`` (span descriptions),
``builder`` (step, collective and phase spans from reports), ``worker``
(what the builder remembers of each worker), ``incident_spans`` and
``incident_attrs`` (incident, evidence and action spans). Pure: no
OpenTelemetry import. It imports no other part of ``otel/``. Its public names
are re-exported by ``trainprobe.sidecar.otel``.
"""

__all__: list[str] = []
