"""The whole sidecar's CPU per relayed report, in one process, with no generators.

    python bench/probes/bench_sidecar_cpu.py [--workers 1000] [--hz 10] [--per-node 8]
        [--interval-ms 500] [--issue-times 8] [--duration 20] [--warmup 12]
        [--telemetry on|off] [--profile OUT.pstats] [--json OUT]

Why: bench_scale.py measures the sidecar end to end over real gRPC, but its
generators share this 2-core VM with the sidecar, so its per-report figure
moves with the load. Here a real :class:`~trainprobe.sidecar.server.Sidecar`
(built from the shipped defaults, actions ``observe``) runs its rules tick,
its telemetry exporters and their threads in real time, and the reports of
``--workers`` ranks on simulated relay nodes reach its ``Relay`` read loop as
they would from gRPC: each node's ``RelayBatch`` is parsed from its bytes (the
method's deserializer) every ``--interval-ms`` and handed to that node's read
coroutine. Every batch's bytes are built before the measured window, so the
generator costs nothing inside it.

The figure is the process's CPU time (every thread: the loop, the OTel
export threads, gRPC's pollers) over the window, divided by the reports
applied in it. What it leaves out is gRPC's own per-message transport,
which bench_scale.py includes. The window should span at least one metrics
collection (``METRIC_INTERVAL_MS``, 10 s): that is where the exporters' cost
lands; the warm-up (12 s) takes the first, whose histogram series are new.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import random
import sys
import time
from typing import Any

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path, observing_sidecar_cli, write_result

add_repo_to_path()

from harness.relay_loadgen import FastSim, relayed  # noqa: E402

from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.cli.sidecar import tune_gc  # noqa: E402
from trainprobe.sidecar.config.settings import Settings, load_settings  # noqa: E402
from trainprobe.sidecar.relay.routes import NodeStream  # noqa: E402
from trainprobe.sidecar.server import Sidecar  # noqa: E402
from trainprobe.sidecar.transport.streams import safe_parser  # noqa: E402

STEPS_PER_REPORT = 2
#: Time to start the sidecar and apply every first report (1,000 step times each).
SETTLE_S = 15.0


class Node:
    """One simulated relay node: its workers, and its batches' bytes by interval."""

    def __init__(self, sims: list[FastSim]) -> None:
        self.sims = sims
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.batches: list[tuple[bytes, int]] = []

    def first(self) -> bytes:
        batch = probe_pb2.RelayBatch()
        for sid, sim in enumerate(self.sims, 1):
            batch.items.add(stream_id=sid, message=sim.hello_bytes)
            batch.items.add(stream_id=sid, message=sim.report().SerializeToString())
        return batch.SerializeToString()

    def plan(self, start: float, intervals: int, interval_s: float, period_s: float) -> None:
        """Every batch it will send, at ``start + i * interval_s``, made now."""
        wall_minus_mono = time.time() - time.monotonic()
        for sim in self.sims:
            sim.next_made = start + sim.phase * period_s
        for i in range(1, intervals + 1):
            at = start + i * interval_s
            made = []
            for sid, sim in enumerate(self.sims, 1):
                while sim.next_made <= at:
                    ns = int(sim.next_made * 1e9)
                    made.append((sid, sim.next_bytes(ns, ns + int(wall_minus_mono * 1e9))))
                    sim.next_made += period_s
            batch = probe_pb2.RelayBatch(items=relayed(made), interval_ms=int(interval_s * 1000))
            self.batches.append((batch.SerializeToString(), len(made)))

    async def stream(self) -> Any:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cli = observing_sidecar_cli("tp-cpu-", telemetry=args.telemetry == "on")
    random.seed(7)
    sims = [
        FastSim("load", r, args.workers, STEPS_PER_REPORT, 1000, args.issue_times)
        for r in range(args.workers)
    ]
    nodes = [Node(sims[i : i + args.per_node]) for i in range(0, len(sims), args.per_node)]
    interval_s, period_s = args.interval_ms / 1000.0, 1.0 / args.hz
    intervals = int((args.warmup + args.duration) / interval_s)
    # Built before the sidecar starts (made, parsed and folded: up to about 20 µs a
    # report), timed to begin once it has taken every worker's first report.
    firsts = [node.first() for node in nodes]
    made = intervals * interval_s * args.hz * args.workers
    start = time.monotonic() + SETTLE_S + made * 20e-6
    for node in nodes:
        node.plan(start, intervals, interval_s, period_s)
    sidecar = Sidecar(load_settings(env={}, cli=cli))
    await sidecar.start()
    tune_gc()  # as the trainprobe-sidecar command does once started
    relay = sidecar.relay
    parse = safe_parser(probe_pb2.RelayBatch)
    tasks = [
        asyncio.ensure_future(relay._read(NodeStream(f"node{i}"), {}, node.stream()))
        for i, node in enumerate(nodes)
    ]
    for node, first in zip(nodes, firsts, strict=True):
        node.queue.put_nowait(parse(first))
    while sum(1 for w in sidecar.registry if w.last_step) < args.workers:
        await asyncio.sleep(0.1)
    slack = start - time.monotonic()
    if slack < 0:
        raise SystemExit(f"the sidecar took the first reports {-slack:.1f} s too late")
    window_from = int(args.warmup / interval_s)
    c0 = l0 = t0 = 0.0
    reports = 0
    profiler = cProfile.Profile() if args.profile else None
    for i in range(intervals):
        at = start + (i + 1) * interval_s
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        if i == window_from:
            c0, l0, t0 = time.process_time(), time.thread_time(), time.monotonic()
            if profiler is not None:
                profiler.enable()
        for node in nodes:
            data, n = node.batches[i]
            node.queue.put_nowait(parse(data))
            if i >= window_from:
                reports += n
    await asyncio.sleep(interval_s / 2)  # let the last batches be read
    c1, l1, t1 = time.process_time(), time.thread_time(), time.monotonic()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    for node in nodes:
        node.queue.put_nowait(None)
    await asyncio.gather(*tasks)
    applied = sum(w.last_step for w in sidecar.registry) // STEPS_PER_REPORT
    await sidecar.stop(grace_s=0.5)
    cpu = c1 - c0
    return {
        "workers": args.workers,
        "telemetry": args.telemetry,
        "window_s": t1 - t0,
        "reports": reports,
        "reports_applied_total": applied,
        "cpu_s": cpu,
        "cpu_share": cpu / (t1 - t0),
        "cpu_us_per_report": cpu / max(reports, 1) * 1e6,
        # The loop thread alone; the rest is the exporters' and gRPC's threads.
        "loop_us_per_report": (l1 - l0) / max(reports, 1) * 1e6,
        "reports_per_cpu_s": reports / max(cpu, 1e-9),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=1000)
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--per-node", type=int, default=8)
    p.add_argument("--interval-ms", type=float, default=float(Settings().relay_interval_ms))
    p.add_argument("--issue-times", type=int, default=8)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=12.0)
    p.add_argument("--telemetry", choices=["on", "off"], default="on")
    p.add_argument("--profile", default="", help="cProfile the window into this file")
    p.add_argument("--json", default="")
    args = p.parse_args()
    started = time.monotonic()
    row = asyncio.run(run(args))
    print(
        f"N={row['workers']} telemetry {row['telemetry']}: {row['cpu_us_per_report']:.1f} µs "
        f"per report, loop thread {row['loop_us_per_report']:.1f} "
        f"({row['reports_per_cpu_s']:.0f} reports per CPU-second; "
        f"{row['cpu_share']:.0%} of a core over {row['window_s']:.1f} s)",
        flush=True,
    )
    if args.json:
        write_result(args.json, "sidecar_cpu", {"params": vars(args), **row}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
