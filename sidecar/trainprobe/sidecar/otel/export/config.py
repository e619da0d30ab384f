"""What to export and where, resolved from the settings and the ``OTEL_*`` environment.

Precedence for the destination: ``otlp_endpoint`` (flag, ``TRAINPROBE_OTLP_ENDPOINT``
or TOML) > ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT`` >
``OTEL_EXPORTER_OTLP_ENDPOINT`` > OTLP-JSON lines in ``state_dir``. The other
standard variables (headers, TLS files, timeout, compression, the batch
processor's ``OTEL_BSP_*`` and ``OTEL_METRIC_EXPORT_*``) go straight to the
SDK. ``OTEL_SDK_DISABLED=true`` turns everything off except an explicitly
requested Prometheus port; ``OTEL_TRACES_EXPORTER=none`` /
``OTEL_METRICS_EXPORTER=none`` turn one signal off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

TRACES_FILE = "traces.otlp.jsonl"
METRICS_FILE = "metrics.otlp.jsonl"
#: Our defaults where the OTel ones (5 s, 60 s) are too slow for an incident.
SPAN_DELAY_MS = 1000
METRIC_INTERVAL_MS = 10_000


class TelemetryError(RuntimeError):
    """Telemetry that was asked for explicitly but cannot run."""


class _Settings(Protocol):
    telemetry: bool
    otlp_endpoint: str | None
    trace_every_n_steps: int
    metrics_port: int | None
    metrics_host: str
    state_dir: Path


@dataclass(frozen=True)
class TelemetryConfig:
    traces: bool
    otlp_metrics: bool
    #: OTLP/gRPC destination; None with ``otlp`` True lets the SDK read OTEL_* itself.
    otlp: bool
    endpoint: str | None
    traces_file: Path
    metrics_file: Path
    prometheus_port: int | None
    prometheus_host: str
    trace_every_n_steps: int
    #: None: the SDK reads OTEL_BSP_SCHEDULE_DELAY / OTEL_METRIC_EXPORT_INTERVAL.
    span_delay_ms: int | None
    metric_interval_ms: int | None
    #: Whether the user asked for it (an endpoint or a port), as opposed to the default.
    explicit: bool

    @property
    def enabled(self) -> bool:
        return self.traces or self.otlp_metrics or self.prometheus_port is not None

    @property
    def destination(self) -> str:
        if self.otlp:
            return self.endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
        return str(self.traces_file.parent)


def _off(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "none"


def telemetry_config(settings: _Settings, env: Mapping[str, str]) -> TelemetryConfig:
    """Resolve settings and environment into one :class:`TelemetryConfig`."""
    on = settings.telemetry and env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"
    env_endpoint = any(
        env.get(n, "").strip()
        for n in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        )
    )
    otlp = settings.otlp_endpoint is not None or env_endpoint
    return TelemetryConfig(
        traces=on and not _off(env, "OTEL_TRACES_EXPORTER"),
        otlp_metrics=on and not _off(env, "OTEL_METRICS_EXPORTER"),
        otlp=otlp,
        endpoint=settings.otlp_endpoint,
        traces_file=settings.state_dir / TRACES_FILE,
        metrics_file=settings.state_dir / METRICS_FILE,
        prometheus_port=settings.metrics_port,
        prometheus_host=settings.metrics_host,
        trace_every_n_steps=settings.trace_every_n_steps,
        span_delay_ms=None if env.get("OTEL_BSP_SCHEDULE_DELAY") else SPAN_DELAY_MS,
        metric_interval_ms=None if env.get("OTEL_METRIC_EXPORT_INTERVAL") else METRIC_INTERVAL_MS,
        explicit=settings.otlp_endpoint is not None or settings.metrics_port is not None,
    )
