"""Telemetry's CPU per report, in process, for one or two sidecar trees side by side.

    python bench/probes/bench_telemetry_path.py [--workers 1000] [--rounds 20] [--repeats 5]
        [--issue-times 8] [--before-src DIR] [--json OUT]

Why in process: on this shared 2-core VM the end-to-end scale benchmark
(bench_scale.py) depends on what else runs; this one times only the sidecar
code that telemetry adds to each report, ``Telemetry.on_report`` (spans,
step/sync/arrival-lag histograms), with ``time.thread_time`` (the loop
thread's own CPU time, so other processes and the exporter threads do not
count). Each tree runs in a fresh child process (``--before-src DIR``: that
checkout's ``sidecar/`` first on the path; the other is this checkout), with a
real pipeline writing OTLP-JSON lines, as shipped without a collector.

Reports are the scale benchmark's (bench/harness/loadgen.py ``Sim``: 2 new steps each,
and with ``--issue-times K`` the issue times of K collectives, same sequence
numbers on every rank, so the registry closes arrival-lag comparisons that
``on_report`` then exports). The registry applies each round first (untimed),
then ``on_report`` runs over all workers (timed). The figure per repeat is the
CPU per report over all rounds; the median of the repeats is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import REPO, bench_telemetry, write_result

HERE = Path(__file__).resolve().parents[1]  # bench/: loadgen, relay_loadgen


def child(args: argparse.Namespace) -> dict[str, object]:
    """Runs in the child: the sidecar tree is whatever comes first on sys.path."""
    import asyncio

    from harness.loadgen import Sim

    from trainprobe.sidecar.transport import pb as convert

    async def run() -> dict[str, object]:
        reg, tel = bench_telemetry("tp-telpath-")
        n = args.workers
        sims = [Sim("load", r, n, 2, 0, args.issue_times) for r in range(n)]
        now = time.monotonic()
        states = [reg.open(convert.hello_from_pb(s.hello), now) for s in sims]
        per_repeat = []
        for _ in range(args.repeats):
            cpu = 0.0
            for _ in range(args.rounds):
                reports = [convert.report_from_pb(s.report().report) for s in sims]
                now = time.monotonic()
                for state, rep in zip(states, reports, strict=True):
                    reg.apply(state, rep, now)
                t0 = time.thread_time()
                for state, rep in zip(states, reports, strict=True):
                    tel.on_report(state, rep)
                cpu += time.thread_time() - t0
                reg.arrivals.sweep(now + 5.0)  # close what is left, as the tick does
                await asyncio.sleep(0)
            per_repeat.append(cpu / (n * args.rounds) * 1e6)
        await tel.aclose()
        assert not tel.failures, tel.failures
        return {
            "median_us": statistics.median(per_repeat),
            "repeats_us": per_repeat,
            "telemetry_module": sys.modules[type(tel).__module__].__file__ or "",
        }

    return asyncio.run(run())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--issue-times", type=int, default=8)
    p.add_argument("--before-src", default="")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.child:
        sys.path[:0] = [str(HERE), str(Path(args.child) / "sidecar")]
        sys.path[2:2] = [str(REPO / "proto"), str(REPO / "hooks")]
        print(json.dumps(child(args)))
        return 0
    started = time.monotonic()
    variants = [("before", args.before_src)] if args.before_src else []
    variants.append(("after" if args.before_src else "this", str(REPO)))
    rows = {}
    for name, src in variants:
        cmd = [sys.executable, __file__, "--child", src, *sys.argv[1:]]
        env = {**os.environ, "PYTHONPATH": ""}
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        rows[name] = json.loads(out.strip().splitlines()[-1])
        print(
            f"{name}: Telemetry.on_report {rows[name]['median_us']:.2f} µs per report "
            f"(repeats {', '.join(f'{x:.2f}' for x in rows[name]['repeats_us'])}; "
            f"{rows[name]['telemetry_module']})",
            flush=True,
        )
    data = {"params": {k: v for k, v in vars(args).items() if k != "json"}, "variants": rows}
    if args.json:
        write_result(args.json, "telemetry_path", data, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
