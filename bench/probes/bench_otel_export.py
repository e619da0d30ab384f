"""The OTLP-JSON export and a first report's cost, in process (issue 15).

    python bench/probes/bench_otel_export.py [--workers 1000] [--rounds 20]

Three figures, each in this thread's CPU time:

- one metrics collection and export of a real pipeline fed ``--workers``
  ranks' reports (``--rounds`` each, 8 issue times a report), its line written
  the direct way (``otel/export/otlp_json.py``, what the exporter writes) and the
  library way (``encode_metrics`` + ``MessageToDict``, the fallback);
- 512 step spans (the batch processor's batch size) encoded both ways, per span;
- a first report of 1,000 step times through a real sidecar's Relay read
  loop, per report (it was about 75 ms while step numbers seen already were
  traced again).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path, bench_telemetry, observing_sidecar_cli

add_repo_to_path()

from harness.loadgen import Sim  # noqa: E402
from harness.relay_loadgen import FastSim  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402

from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.config.settings import load_settings  # noqa: E402
from trainprobe.sidecar.otel.export import jsonlines  # noqa: E402
from trainprobe.sidecar.otel.export.jsonlines import metrics_line, otlp_json, spans_line  # noqa: E402
from trainprobe.sidecar.otel.traces.builder import TraceBuilder  # noqa: E402
from trainprobe.sidecar.relay.routes import NodeStream  # noqa: E402
from trainprobe.sidecar.server import Sidecar  # noqa: E402
from trainprobe.sidecar.transport import pb as convert  # noqa: E402


def cpu_of(fn, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def library_metrics_line(data: object) -> str:
    return otlp_json(encode_metrics(data))  # type: ignore[arg-type]


async def exports(n: int, rounds: int) -> None:
    reg, tel = bench_telemetry("tp-otelx-")
    sims = [Sim("load", r, n, 2, 0, 8) for r in range(n)]
    states = [reg.open(convert.hello_from_pb(s.hello), time.monotonic()) for s in sims]
    for _ in range(rounds):
        now = time.monotonic()
        for sim, st in zip(sims, states, strict=True):
            rep = convert.report_from_pb(sim.report().report)
            reg.apply(st, rep, now)
            tel.on_report(st, rep)
        reg.arrivals.sweep(now + 5.0)
    provider = tel.pipeline.meter_provider
    # A collection and its export to the JSON-lines file, as the export timer runs
    # it (the gauges are read on this loop, so the flush runs in a thread).
    for name, line in (("direct", jsonlines.metrics_line), ("library", library_metrics_line)):
        jsonlines.metrics_line = line  # type: ignore[assignment]
        cpu = await asyncio.to_thread(cpu_of, provider.force_flush)
        print(f"metrics collection and export, {n} workers: {name} {cpu:.3f} s of CPU")
    jsonlines.metrics_line = metrics_line  # type: ignore[assignment]
    # Spans: one step span per worker, as the trace builder makes them.
    builder = TraceBuilder(every_n_steps=1)
    descs = []
    for sim, st in zip(sims[:512], states[:512], strict=True):
        rep = convert.report_from_pb(sim.report().report)
        descs.extend(builder.on_report(st, rep, 0.0)[:1])
    batch = [tel.pipeline._readable(d) for d in descs]
    direct = cpu_of(lambda: spans_line(batch)) / len(batch) * 1e6
    library = cpu_of(lambda: otlp_json(encode_spans(batch))) / len(batch) * 1e6
    print(f"{len(batch)} spans: direct {direct:.0f} µs a span, library {library:.0f} µs a span")
    await tel.aclose()


async def first_reports(count: int = 40) -> None:
    sidecar = Sidecar(load_settings(env={}, cli=observing_sidecar_cli("tp-first-")))
    await sidecar.start()
    batch = probe_pb2.RelayBatch()
    for sid, sim in enumerate((FastSim("load", r, 1000, 2, 1000, 8) for r in range(count)), 1):
        batch.items.add(stream_id=sid, message=sim.hello_bytes)
        batch.items.add(stream_id=sid, message=sim.report().SerializeToString())
    parsed = probe_pb2.RelayBatch.FromString(batch.SerializeToString())

    async def one() -> object:
        yield parsed

    t0 = time.thread_time()
    await sidecar.relay._read(NodeStream("bench"), {}, one())
    per = (time.thread_time() - t0) / count * 1e3
    print(f"first report of 1,000 step times: {per:.1f} ms a report")
    await sidecar.stop(grace_s=0.5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    asyncio.run(exports(args.workers, args.rounds))
    asyncio.run(first_reports())
    return 0


if __name__ == "__main__":
    sys.exit(main())
