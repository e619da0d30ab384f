"""One log line when telemetry export starts failing, one when it recovers.

A dead collector must cost at most the bounded queues and one log line; the
OpenTelemetry SDK alone would log a warning per retry. So the exporters are
wrapped (see :mod:`pipeline`) to report each result here, and
:class:`QuietSdkLogs` turns the SDK's own per-retry warnings into the detail
of our single line instead.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("trainprobe.sidecar")

#: SDK loggers whose export warnings we replace with our one line.
SDK_EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.metrics._internal.export",
)


class ExportHealth:
    """Tracks whether exports to one destination work. Thread-safe."""

    def __init__(self, destination: str, queue_hint: str) -> None:
        self.destination = destination
        self.queue_hint = queue_hint
        self._lock = threading.Lock()
        self.failing = False
        self.lost: dict[str, int] = {}
        self.exported: dict[str, int] = {}
        self.outages = 0
        self._detail = ""

    def note(self, detail: str) -> None:
        """Remember the latest error text the SDK had to say."""
        with self._lock:
            self._detail = detail

    def succeeded(self, signal: str, items: int) -> None:
        with self._lock:
            self.exported[signal] = self.exported.get(signal, 0) + items
            if not self.failing:
                return
            self.failing = False
            lost = ", ".join(f"{n} {s}" for s, n in sorted(self.lost.items()) if n) or "nothing"
        log.info(
            "telemetry export to %s works again; lost during the outage: %s", self.destination, lost
        )

    def failed(self, signal: str, items: int) -> None:
        with self._lock:
            self.lost[signal] = self.lost.get(signal, 0) + items
            if self.failing:
                return
            self.failing = True
            self.outages += 1
            detail = self._detail or "export failed"
        log.warning(
            "telemetry export to %s is failing (%s); %s; detection and actions are unaffected",
            self.destination,
            detail,
            self.queue_hint,
        )


class QuietSdkLogs(logging.Filter):
    """Passes SDK debug/info records; hands warnings and errors to :class:`ExportHealth`."""

    def __init__(self, health: ExportHealth) -> None:
        super().__init__()
        self.health = health

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        try:
            self.health.note(record.getMessage())
        except Exception:  # a malformed record must not break logging
            self.health.note(str(record.msg))
        return False

    def install(self) -> None:
        for name in SDK_EXPORT_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def remove(self) -> None:
        for name in SDK_EXPORT_LOGGERS:
            logging.getLogger(name).removeFilter(self)
