"""Run every benchmark, then rewrite docs/PERFORMANCE.md from the results.

    python bench/run_all.py            # make bench: full runs, results in bench/results/
    python bench/run_all.py --quick    # make bench-quick: smoke test in a temporary
                                       # directory; docs/PERFORMANCE.md is not touched
    python bench/run_all.py --only cost,scale   # a subset (full runs), then the report

Each benchmark runs in its own process and writes its result file (with the
command that produced it); bench/report.py then renders the tables and plots.
The benchmarks whose sections of docs/PERFORMANCE.md are written by hand
(``EXTRA``) run too, and only print their tables.
The order puts the CPU-sensitive scale and cost measurements first, while the
machine is quietest, and the long detection and fault-matrix benchmarks last.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, RESULTS

HERE = Path(__file__).resolve().parent
#: The sidecar as shipped (telemetry on) saturates early: fewer, smaller levels.
ARGS = {
    "scale_telemetry": [
        *("--telemetry", "on", "--workers", "100,250,500,1000", "--profile-workers", "250")
    ],
    # Simulated relay nodes of 8 workers each, batching every 100 ms, to one upstream.
    "scale_relay": [
        *("--relay-workers-per-node", "8", "--relay-interval-ms", "100"),
        *("--workers", "1000,1500,1750,2000,2500"),
        *("--profile-workers", "2000"),
    ],
    # The same nodes batching every 200 ms: 16 reports per RelayBatch.
    "scale_relay_200ms": [
        *("--relay-workers-per-node", "8", "--relay-interval-ms", "200"),
        *("--workers", "2000,2250,2500", "--profile-workers", "0"),
    ],
}
#: Benchmarks with hand-written sections: run (not in --quick), tables printed.
EXTRA = [
    ["bench_sidecar_otel.py", "--rounds", "7"],
    ["bench_sidecar_otel.py", "--encoder"],
    # Issue 6: the same runs, with the time to a named culprit and its stacks.
    ["bench_culprit.py", "--trials", "5", "--mode", "sleep", "--watch-ddp"],
    ["bench_culprit.py", "--trials", "3", "--mode", "stop", "--watch-ddp"],
    # Issue 13: 24,000 hostile streams with a real worker connected, RSS sampled.
    ["bench_fuzz_soak.py", "--json", "bench/results/fuzz_soak.json"],
    # Issue 15: what arrival lag costs per report at 1,000 workers.
    ["bench_arrival.py", "--workers", "1000", "--collectives", "8"],
    # Issue 15: the sidecar's CPU per report at job scale, telemetry on (the
    # default) and off, at the shipped relay_interval_ms, next to the machine's
    # speed and gRPC's own share.
    ["speed_probe.py"],
    *(
        [
            "bench_scale.py",
            *("--telemetry", telemetry, "--relay-workers-per-node", "8"),
            *("--workers", "1000", "--issue-times", "8"),
            *("--duration", "8", "--warmup", "3", "--profile-workers", "0"),
        ]
        for telemetry in ("on", "off", "on", "off")
    ),
    *(["bench_sidecar_cpu.py", "--telemetry", t] for t in ("on", "off")),
    ["bench_grpc_relay.py", "--parse"],
    # What folding moves onto each relay node.
    ["bench_relay_fold.py", "--json", "bench/results/relay_fold.json"],
    ["bench_otel_export.py"],
    # Issue 21: what a session costs, by structure and as the process's RSS at
    # the 10,000-session cap, over churn rounds and after close (goal <= 150 MB).
    ["session_structures.py", "--json", "bench/results/session_structures.json"],
    ["bench_sessions.py", "--json", "bench/results/sessions.json"],
    # Issue 21: 2,000 workers at 10 Hz over direct streams, as shipped (telemetry
    # on): false incidents, reports shed, and the probes' time to a verdict.
    [
        "bench_scale.py",
        *("--telemetry", "on", "--workers", "2000", "--hz", "10"),
        *("--duration", "30", "--profile-workers", "0"),
        *("--json", "bench/results/scale_overload.json"),
    ],
    ["speed_probe.py"],
]
BENCHES = (
    "report_path",
    "scale",
    "scale_telemetry",
    "scale_relay",
    "scale_relay_200ms",
    "cost",
    "hook_memory",
    "detection",
    "faults",
)
SCRIPTS = {
    "report_path": "bench_report_path.py",
    "scale": "bench_scale.py",
    "scale_telemetry": "bench_scale.py",
    "scale_relay": "bench_scale.py",
    "scale_relay_200ms": "bench_scale.py",
    "cost": "bench_cost.py",
    "hook_memory": "bench_hook.py",
    "detection": "bench_detection.py",
    "faults": "bench_faults.py",
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default=",".join(BENCHES))
    args = p.parse_args()
    names = [n for n in BENCHES if n in args.only.split(",")]
    results = Path(tempfile.mkdtemp(prefix="tpbench-")) if args.quick else RESULTS
    results.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names:
        cmd = [sys.executable, str(HERE / SCRIPTS[name]), *ARGS.get(name, [])]
        out = results / f"{name}.json"
        cmd += ["--json", str(out.relative_to(REPO) if out.is_relative_to(REPO) else out)]
        if args.quick:
            cmd.append("--quick")
        print(f"\n### {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.run(cmd, cwd=REPO).returncode
        print(f"### {name}: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
    if not args.quick and args.only == ",".join(BENCHES):
        for argv in EXTRA:
            print(f"\n### python bench/{' '.join(argv)}", flush=True)
            if subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]]).returncode:
                failed.append(argv[0])
    report = [sys.executable, str(HERE / "report.py"), "--results", str(results)]
    if args.quick:
        report += ["--doc", str(results / "PERFORMANCE.md"), "--plots", str(results / "perf")]
    failed += [] if subprocess.run(report).returncode == 0 else ["report"]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
