"""The OTLP side of bench/probes/bench_sidecar_otel.py: a receiver that only
counts spans, in a process of its own (``python otlp_side.py COUNT_FILE``
prints its port), and what the SDK's OTLP encoder costs per span."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

__all__ = ["Receiver", "encoder_cost", "serve_receiver"]


# -- an OTLP/gRPC receiver that only counts, in its own process ---------------------


def serve_receiver(count_file: str) -> None:
    from opentelemetry.proto.collector.metrics.v1 import (
        metrics_service_pb2,
        metrics_service_pb2_grpc,
    )
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    lock = threading.Lock()
    spans = [0]

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with lock:
                spans[0] += n
                Path(count_file).write_text(str(spans[0]))
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(1)


class Receiver:
    """:func:`serve_receiver` in a child process, and the spans it has counted."""

    def __init__(self, workdir: Path) -> None:
        from tests.support import child_env  # the caller has put the repository on sys.path

        self.count_file = workdir / f"spans-{time.monotonic_ns()}.txt"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.count_file)],
            stdout=subprocess.PIPE,
            env=child_env(),
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def spans(self) -> int:
        try:
            return int(self.count_file.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# -- the SDK's encoder, per span and attribute ----------------------------------------


def encoder_cost(repeats: int = 5, spans: int = 2000) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, TraceFlags

    resource = Resource({"service.name": "trainprobe-sidecar", "host.name": "node"})
    scope = InstrumentationScope("trainprobe.sidecar", "0")
    print("| attributes per span | OTLP encode + serialize, median per span |")
    print("| --- | --- |")
    for n in (0, 5, 10, 15):
        attrs = {f"trainprobe.attr{i}": i for i in range(n)}
        batch = [
            ReadableSpan(
                "step",
                SpanContext(i + 1, i + 1, False, TraceFlags(TraceFlags.SAMPLED)),
                None,
                resource,
                attrs,
                start_time=1,
                end_time=2,
                instrumentation_scope=scope,
            )
            for i in range(spans)
        ]
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            for i in range(0, spans, 512):  # the batch processor's batch size
                encode_spans(batch[i : i + 512]).SerializeToString()
            times.append((time.perf_counter() - t) / spans)
        print(f"| {n} | {statistics.median(times) * 1e6:.1f} µs |")


if __name__ == "__main__":
    serve_receiver(sys.argv[1])
