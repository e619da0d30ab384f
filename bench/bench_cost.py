"""Cost per training step on the training thread: trainprobe vs NVRx vs torchelastic.

    python bench/bench_cost.py [--rounds 30] [--block 100] [--iterations 1500]
                               [--pace-ms 15] [--quick] [--json OUT]

One process, the same servers, two interleaved regimes. Every call is timed
alone with ``perf_counter_ns``:

- ``back_to_back``: each round runs a block of ``--block`` consecutive calls of
  every candidate, in an order that rotates every round, then sleeps 1.05 s
  (the FileTimerServer drains its pipe once a second). Caches are hot: this is
  each call's own cost.
- ``paced``: each iteration sleeps ``--pace-ms`` (a step that waits on the
  device), then calls every candidate once, in rotating order. Every server
  has gone idle in between, as in real training; on this machine (a nested
  VM) the first calls after a sleep pay a few microseconds of wake-up for
  anything, which inflates small costs most.

Candidates:

- ``bare``: an empty function of one argument (the loop's and timer's own cost);
- ``trainprobe``: ``LivenessProbeHook.on_step_end(i)``, its reporter streaming to
  a real sidecar process at 10 Hz;
- ``nvrx``: ``RankMonitorClient.send_heartbeat()`` against a real NVRx
  ``RankMonitorServer`` process (nvidia-resiliency-ext 0.4.1);
- ``elastic``: ``with expires(after=60):`` (torchelastic's documented form, whose
  default scope inspects the caller's stack) against a real ``FileTimerServer``
  process; ``elastic_scoped`` passes ``scope="step"`` and skips that inspection.

Net cost = a call's time minus the median ``bare`` time of the same regime. A
separate burst probe measures how many back-to-back ``expires()`` calls fit
before the FileTimerServer's pipe refuses a write. GC is off while timing, so
a collection is not billed to whichever call triggered it.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness.common import add_repo_to_path, fmt_us, percentile, summarize, write_result

add_repo_to_path()

from harness.anchors import ElasticTimerServer, NvrxMonitor  # noqa: E402

from tests.support import SidecarProcess, short_tmpdir, wait_for  # noqa: E402

CANDIDATES = ("bare", "trainprobe", "nvrx", "elastic", "elastic_scoped")


def elastic_burst(limit: int) -> dict[str, float]:
    """Back-to-back ``expires()`` until the FileTimerServer's pipe refuses a write."""
    from torch.distributed.elastic.timer import expires

    t0 = time.perf_counter()
    done = 0
    error = ""
    for _ in range(limit):
        try:
            with expires(after=60, scope="burst"):
                pass
        except OSError as err:
            error = type(err).__name__
            break
        done += 1
    elapsed = time.perf_counter() - t0
    return {"calls_before_error": done, "error": error, "calls_per_s": done / elapsed}


def _timed(fn: Callable[[int], object], i: int, out: list[float]) -> bool:
    clock = time.perf_counter_ns
    t0 = clock()
    try:
        fn(i)
    except OSError:
        return False
    out.append(clock() - t0)
    return True


def measure_paced(fns: dict[str, Callable[[int], object]], iterations: int, pace_s: float) -> dict:
    """One call of each candidate per ``pace_s`` sleep, in rotating order."""
    names = list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    errors = dict.fromkeys(names, 0)
    gc.collect()
    gc.disable()
    try:
        for i in range(iterations):
            time.sleep(pace_s)
            k = i % len(names)
            for name in names[k:] + names[:k]:
                if not _timed(fns[name], i, samples[name]):
                    errors[name] += 1
    finally:
        gc.enable()
    return {"samples": samples, "errors": errors}


def measure_back_to_back(fns: dict[str, Callable[[int], object]], rounds: int, block: int) -> dict:
    """Blocks of ``block`` consecutive calls per candidate, rotating every round."""
    names = list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    errors = dict.fromkeys(names, 0)
    for r in range(rounds):
        time.sleep(1.05)
        k = r % len(names)
        gc.collect()
        gc.disable()
        try:
            for name in names[k:] + names[:k]:
                fn, out = fns[name], samples[name]
                for i in range(block):
                    if not _timed(fn, i, out):
                        errors[name] += 1
        finally:
            gc.enable()
    return {"samples": samples, "errors": errors}


def batch_ns(fn: Callable[[int], object], batches: int, size: int = 1000) -> float:
    """Median per-call time over batches of ``size`` back-to-back calls."""
    clock = time.perf_counter_ns
    out = []
    for _ in range(batches):
        t0 = clock()
        for j in range(size):
            fn(j)
        out.append((clock() - t0) / size)
    return sorted(out)[len(out) // 2]


def summarize_pass(raw: dict) -> dict:
    """Raw and net (minus the bare call) statistics, and ratios to trainprobe."""
    bare_median = summarize(raw["samples"]["bare"])["median"]
    results: dict[str, dict] = {}
    for name in CANDIDATES:
        xs = raw["samples"][name]
        results[name] = {
            "raw_ns": summarize(xs),
            "net_ns": summarize([x - bare_median for x in xs]),
            "errors": raw["errors"][name],
        }
    results["bare"]["raw_ns"]["p99"] = percentile(raw["samples"]["bare"], 0.99)
    tp = results["trainprobe"]["net_ns"]
    for name in ("nvrx", "elastic", "elastic_scoped"):
        other = results[name]["net_ns"]
        results[name]["ratio_median"] = other["median"] / tp["median"]
        results[name]["ratio_p99"] = other["p99"] / tp["p99"]
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--block", type=int, default=100)
    p.add_argument("--iterations", type=int, default=1500)
    p.add_argument("--pace-ms", type=float, default=15.0)
    p.add_argument("--quick", action="store_true", help="5 rounds, 300 iterations: a smoke test")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.iterations = min(args.rounds, 5), min(args.iterations, 300)
    started = time.monotonic()

    from torch.distributed.elastic.timer import expires

    from trainprobe.hooks import LivenessProbeHook

    workdir = short_tmpdir("tpc-")
    nvrx = NvrxMonitor(Path(tempfile.mkdtemp(prefix="nvrx-", dir="/tmp"))).start()
    elastic = ElasticTimerServer(workdir).start()
    sidecar = SidecarProcess(workdir, "--stall-timeout-s", "3600").start()
    try:
        hook = LivenessProbeHook(
            target=sidecar.target, interval_ms=100, job_id="bench-cost", rank=0, world_size=1
        )
        wait_for(lambda: hook.connected, 10, what="hook connection")

        def bare(i: int) -> None:
            pass

        def nvrx_heartbeat(i: int) -> None:
            nvrx.client.send_heartbeat()

        def elastic_default(i: int) -> None:
            with expires(after=60):
                pass

        def elastic_scoped(i: int) -> None:
            with expires(after=60, scope="step"):
                pass

        fns = {
            "bare": bare,
            "trainprobe": hook.on_step_end,
            "nvrx": nvrx_heartbeat,
            "elastic": elastic_default,
            "elastic_scoped": elastic_scoped,
        }
        passes = {
            "back_to_back": measure_back_to_back(fns, args.rounds, args.block),
            "paced": measure_paced(fns, args.iterations, args.pace_ms / 1000.0),
        }
        reports = hook._seq
        batch = {"bare": batch_ns(bare, 50), "trainprobe": batch_ns(hook.on_step_end, 50)}
        time.sleep(1.5)  # let the FileTimerServer drain before the burst
        burst = elastic_burst(20_000)
        hook.close()
    finally:
        sidecar.stop()
        elastic.stop()
        nvrx.stop()

    modes = {mode: summarize_pass(raw) for mode, raw in passes.items()}
    data = {
        "rounds": args.rounds,
        "block": args.block,
        "iterations": args.iterations,
        "pace_ms": args.pace_ms,
        "quick": args.quick,
        "reports_sent": reports,
        "modes": modes,
        "batch_ns_per_call": batch,
        "elastic_burst": burst,
        "goal_ratio": 50.0,
        "goal_met": all(m["nvrx"]["ratio_median"] >= 50.0 for m in modes.values()),
    }
    for mode, results in modes.items():
        print(f"\n{mode}: candidate | median (net) | p99 (net) | ÷ trainprobe")
        for name in CANDIDATES:
            r = results[name]
            ratio = ""
            if "ratio_median" in r:
                ratio = f"{r['ratio_median']:.0f}x / {r['ratio_p99']:.0f}x"
            print(
                f"  {name:15} {fmt_us(r['net_ns']['median']):>10} "
                f"{fmt_us(r['net_ns']['p99']):>10}  {ratio}  errors={r['errors']}"
            )
    print(f"elastic burst: {burst}")
    if args.json:
        write_result(args.json, "cost", data, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
