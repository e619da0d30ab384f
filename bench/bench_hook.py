"""Memory of a training process with the hook, over a million steps.

    python bench/bench_hook.py [--steps 1000000] [--seconds 60] [--quick] [--json OUT]

A real sidecar runs in its own process; this process holds a
``LivenessProbeHook`` reporting to it at 10 Hz and calls ``on_step_end``
``--steps`` times, spread over ``--seconds`` (a short sleep every 1,000
steps) so that the reporter builds and sends hundreds of reports. RSS is read
from /proc every 50,000 steps; growth is measured from the first sample
(taken after 10,000 warm-up steps) to the last, after a full GC.

The same loop also times ``on_step_end`` in batches of 1,000 consecutive
calls (no per-call timer), next to an empty call in the same batches.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from _common import add_repo_to_path, rss_bytes, write_result

add_repo_to_path()

from tests.support import SidecarProcess, short_tmpdir, wait_for  # noqa: E402

WARMUP = 10_000
SAMPLE_EVERY = 50_000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--quick", action="store_true", help="100,000 steps over 10 s")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.quick:
        args.steps, args.seconds = min(args.steps, 100_000), min(args.seconds, 10.0)
    started = time.monotonic()

    from trainprobe.hooks import LivenessProbeHook

    workdir = short_tmpdir("tph-")
    with SidecarProcess(workdir, "--stall-timeout-s", "3600") as sidecar:
        hook = LivenessProbeHook(
            target=sidecar.target, interval_ms=100, job_id="bench-mem", rank=0, world_size=1
        )
        wait_for(lambda: hook.connected, 10, what="hook connection")
        step = hook.on_step_end

        def bare(i: int) -> None:
            pass

        pause = args.seconds / (args.steps / 1000)
        clock = time.perf_counter_ns
        batch_hook: list[float] = []
        batch_bare: list[float] = []
        series: list[tuple[int, int]] = []
        for start in range(0, WARMUP, 1000):
            for i in range(start, start + 1000):
                step(i)
        gc.collect()
        series.append((WARMUP, rss_bytes()))
        for start in range(WARMUP, args.steps, 1000):
            t0 = clock()
            for i in range(start, start + 1000):
                step(i)
            t1 = clock()
            for i in range(start, start + 1000):
                bare(i)
            t2 = clock()
            batch_hook.append((t1 - t0) / 1000)
            batch_bare.append((t2 - t1) / 1000)
            end = start + 1000
            if end % SAMPLE_EVERY == 0:
                series.append((end, rss_bytes()))
            time.sleep(pause)
        time.sleep(0.5)
        gc.collect()
        series.append((args.steps, rss_bytes()))
        reports = hook._seq
        connected = hook.connected
        hook.close()
    batch_hook.sort()
    batch_bare.sort()
    growth = series[-1][1] - series[0][1]
    data = {
        "steps": args.steps,
        "seconds": args.seconds,
        "quick": args.quick,
        "reports_sent": reports,
        "connected_at_end": connected,
        "rss_series": [{"step": s, "rss_bytes": r} for s, r in series],
        "rss_growth_bytes": growth,
        "batch_ns_per_call_median": batch_hook[len(batch_hook) // 2],
        "bare_ns_per_call_median": batch_bare[len(batch_bare) // 2],
        "goal_growth_bytes": 2 * 2**20,
        "goal_met": growth <= 2 * 2**20,
    }
    print(
        f"RSS growth after {args.steps:,} steps ({reports} reports): "
        f"{growth / 2**20:.2f} MiB; on_step_end in batches: "
        f"{data['batch_ns_per_call_median']:.0f} ns/call (empty call "
        f"{data['bare_ns_per_call_median']:.0f} ns)"
    )
    if args.json:
        write_result(args.json, "hook_memory", data, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
