"""What gRPC alone costs the upstream per RelayBatch: a bare grpc.aio server.

    python bench/probes/bench_grpc_relay.py [--workers 1000] [--per-node 8]
        [--interval-ms 500] [--issue-times 8] [--parse] [--duration 10]

A ``Relay`` method that only counts the batches it reads (``--parse``: also
parses each into a ``RelayBatch``, as the sidecar's deserializer does) runs in
a child process pinned to CPU 0; bench/harness/relay_loadgen.py sends it what the
scale benchmark's relayed generators send (pinned to the other CPUs). The
figure is the server process's CPU (every thread) per message read, and per
report carried: the floor under the sidecar's per-report cost that no change
in trainprobe's own code can remove.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path

add_repo_to_path()
HERE = Path(__file__).resolve().parents[1]  # bench/: loadgen, relay_loadgen


def serve(path: str, parse: bool, warmup: float, duration: float) -> dict[str, float]:
    import grpc

    from trainprobe.proto import RELAY_ACCEPTED_KEY, probe_pb2

    count = 0

    async def relay(request_iterator, context):  # type: ignore[no-untyped-def]
        nonlocal count
        await context.send_initial_metadata(((RELAY_ACCEPTED_KEY, "1"),))
        async for _ in request_iterator:
            count += 1

    def cpu() -> float:
        t = os.times()
        return t.user + t.system

    async def main() -> dict[str, float]:
        # TP_GRPC_OPTIONS: server channel arguments to compare, as JSON pairs.
        options = [tuple(o) for o in json.loads(os.environ.get("TP_GRPC_OPTIONS", "[]"))]
        server = grpc.aio.server(options=options)
        method = grpc.stream_stream_rpc_method_handler(
            relay,
            request_deserializer=probe_pb2.RelayBatch.FromString if parse else None,
            response_serializer=probe_pb2.RelayCommand.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("trainprobe.v1.Sidecar", {"Relay": method}),)
        )
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        await asyncio.sleep(warmup)
        n0, c0, t0 = count, cpu(), time.monotonic()
        await asyncio.sleep(duration)
        n1, c1, t1 = count, cpu(), time.monotonic()
        await server.stop(0)
        return {"messages_per_s": (n1 - n0) / (t1 - t0), "cpu_s": c1 - c0, "messages": n1 - n0}

    return asyncio.run(main())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=1000)
    p.add_argument("--per-node", type=int, default=8)
    p.add_argument("--hz", type=float, default=10.0)
    from trainprobe.sidecar.config.settings import Settings

    p.add_argument("--interval-ms", type=float, default=float(Settings().relay_interval_ms))
    p.add_argument("--issue-times", type=int, default=8)
    p.add_argument("--parse", action="store_true")
    p.add_argument("--warmup", type=float, default=6.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--serve", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        print(json.dumps(serve(args.serve, args.parse, args.warmup, args.duration)), flush=True)
        return 0
    work = Path(tempfile.mkdtemp(prefix="tpg-"))
    sock = str(work / "g.sock")
    cpus = sorted(os.sched_getaffinity(0))
    gen_cpus = set(cpus[1:]) or {cpus[0]}
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", sock, *sys.argv[1:]],
        stdout=subprocess.PIPE,
        # The streams the stop cancels print grpc's CancelledError tracebacks there.
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpus[0]}),
    )
    while not Path(sock).exists():
        time.sleep(0.05)
    gen = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "harness" / "relay_loadgen.py"),
            *("--target", f"unix://{sock}", "--workers", str(args.workers)),
            *("--per-node", str(args.per_node), "--hz", str(args.hz)),
            *("--interval-ms", str(args.interval_ms), "--issue-times", str(args.issue_times)),
            *("--rank-offset", "0", "--world-size", str(args.workers), "--probes", "0"),
            *("--ready", str(work / "ready"), "--stop", str(work / "stop")),
            *("--out", str(work / "gen.json")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, gen_cpus),
    )
    out, _ = server.communicate(timeout=args.warmup + args.duration + 60)
    (work / "stop").touch()
    gen.wait(60)
    row = json.loads(out.strip().splitlines()[-1])
    per_msg = row["cpu_s"] / max(row["messages"], 1) * 1e6
    reports = args.per_node * args.hz * args.interval_ms / 1000.0
    print(
        f"{'parse' if args.parse else 'raw'}: {row['messages_per_s']:.0f} messages/s, "
        f"{per_msg:.1f} µs of server CPU a message, {per_msg / reports:.1f} µs a report "
        f"({reports:.0f} reports a message)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
