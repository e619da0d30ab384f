"""Export: ``config`` (what to export and where, from the settings and
``OTEL_*``), ``resource_attrs`` (the sidecar's resource), ``health`` and
``guards`` (one log line when export starts failing, one when it recovers),
``pipeline`` (the OpenTelemetry SDK adapter) and ``jsonlines``/``otlp_json``
(OTLP-JSON lines when no collector is configured).

It may import ``traces/`` and ``metrics/``. Its public names are re-exported
by ``trainprobe.sidecar.otel``.
"""

__all__: list[str] = []
