"""Cost of the hook on the training thread, and its memory over many steps.

    python bench/bench_hook.py [--calls 200000] [--steps 100000] [--json OUT]

A real sidecar runs in its own process; the hook reports to it at 10 Hz
(interval_ms=100) while this process calls on_step_end. Each figure is
measured side by side with a bare loop in the same run:

- per-call cost: each call timed alone with perf_counter_ns, minus the median
  cost of timing an empty function the same way (the timer's own cost);
- batch cost: median over batches of 1,000 calls (no per-call timer noise);
- memory: RSS growth after --steps steps (reporter live, sidecar live).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def start_sidecar(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    sock = workdir / "s.sock"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainprobe.sidecar",
            "--listen",
            f"unix://{sock}",
            "--state-dir",
            str(workdir / "state"),
            "--stall-timeout-s",
            "3600",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("sidecar did not start")
        time.sleep(0.05)
    return proc, f"unix://{sock}"


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def per_call_ns(fn, calls: int) -> list[float]:
    clock = time.perf_counter_ns
    out = [0.0] * calls
    for i in range(calls):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    return out


def batch_ns(fn, batches: int, size: int = 1000) -> list[float]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(batches):
        t0 = clock()
        for _ in range(size):
            fn()
        out.append((clock() - t0) / size)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=200_000)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument(
        "--step-seconds",
        type=float,
        default=20.0,
        help="wall time over which the memory run spreads its steps",
    )
    p.add_argument("--json", default="")
    args = p.parse_args()

    from trainprobe.hooks import LivenessProbeHook

    workdir = Path(tempfile.mkdtemp(prefix="tpb-", dir="/tmp"))
    sidecar, target = start_sidecar(workdir)
    try:
        hook = LivenessProbeHook(
            target=target, interval_ms=100, job_id="bench", rank=0, world_size=1
        )
        deadline = time.monotonic() + 10
        while not hook.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hook.connected, "hook did not connect"

        def bare() -> None:
            pass

        step = hook.on_step_end
        gc.disable()
        # Interleave the two so that machine noise hits both alike.
        timer, cost, bare_b, hook_b = [], [], [], []
        for _ in range(10):
            timer += per_call_ns(bare, args.calls // 10)
            cost += per_call_ns(step, args.calls // 10)
            bare_b += batch_ns(bare, 20)
            hook_b += batch_ns(step, 20)
        gc.enable()
        overhead = statistics.median(timer)
        net = [c - overhead for c in cost]

        gc.collect()
        rss0 = rss_bytes()
        per_100 = args.step_seconds / args.steps * 100
        for i in range(args.steps):
            step(i)
            if i % 100 == 0:
                time.sleep(per_100)  # spread the steps so the reporter sends many reports
        time.sleep(0.5)
        gc.collect()
        rss1 = rss_bytes()
        reports = hook._seq
        hook.close()
        result = {
            "on_step_end_median_ns": statistics.median(net),
            "on_step_end_p99_ns": percentile(net, 0.99),
            "timer_overhead_ns": overhead,
            "bare_call_batch_ns": statistics.median(bare_b),
            "on_step_end_batch_ns": statistics.median(hook_b),
            "rss_growth_bytes": rss1 - rss0,
            "steps": args.steps,
            "reports_sent": reports,
        }
    finally:
        sidecar.terminate()
        sidecar.wait(10)
    print(json.dumps(result, indent=2))
    print()
    print("| figure | value | goal |")
    print("| --- | --- | --- |")
    print(
        f"| `on_step_end` per call, median (timer cost subtracted) | "
        f"{result['on_step_end_median_ns'] / 1000:.3f} µs | ≤ 1 µs |"
    )
    print(
        f"| `on_step_end` per call, p99 (timer cost subtracted) | "
        f"{result['on_step_end_p99_ns'] / 1000:.3f} µs | ≤ 5 µs |"
    )
    print(
        f"| `on_step_end` in batches of 1,000, median per call | "
        f"{result['on_step_end_batch_ns']:.0f} ns (bare call {result['bare_call_batch_ns']:.0f} ns)"
        " | |"
    )
    print(
        f"| RSS growth after {args.steps:,} steps (reporter at 10 Hz, "
        f"{reports} reports sent) | {result['rss_growth_bytes'] / 2**20:.2f} MiB | ≤ 2 MiB |"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
