"""Detection latency, and the time to a named culprit, in the same runs.

    python bench/probes/bench_culprit.py [--trials 5] [--ranks 4] [--stall-timeout-s 5]
                                  [--mode sleep|stop|gil] [--watch-ddp] [--json OUT]

Each trial starts a real sidecar process and real gloo ranks
(tests/workers/ddp_worker.py). One rank hangs at a random step (``sleep`` inside
the step: its peers block in the allreduce; ``stop``: SIGSTOP; ``gil``: a C
call that holds the GIL). Onset is the wall time the hanging rank logged just
before hanging; detection is the incident's wall time (the tick that found
it). The culprit analysis runs in that same tick, so the rank is named at
detection; its stacks are read next, before the incident is logged and the
kill starts: "named + where" adds that time (``stacks_s``). Both clocks are
this machine's. ``--watch-ddp`` gives the analysis collective sequence numbers
(``--sync-timeout-s`` is set to the stall timeout, so either rule may fire).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support import SidecarProcess, Workers, short_tmpdir, wait_for  # noqa: E402


def trial(
    ranks: int, mode: str, stall_s: float, hang_at: int, hang_rank: int, watch_ddp: bool
) -> dict:
    flags = ["--stall-timeout-s", str(stall_s), "--heartbeat-timeout-s", str(stall_s)]
    flags += ["--sync-timeout-s", str(stall_s)]
    workdir = short_tmpdir("tpd-")
    with (
        SidecarProcess(workdir, *flags) as sc,
        Workers(
            ranks,
            sc.target,
            workdir,
            job_id=f"bench-{time.monotonic_ns()}",
            args=[
                "--steps",
                "100000",
                "--step-s",
                "0.02",
                "--interval-ms",
                "100",
                "--hang-rank",
                str(hang_rank),
                "--hang-at",
                str(hang_at),
                "--hang-how",
                mode,
                *(["--watch-ddp"] if watch_ddp else []),
            ],
        ) as w,
    ):
        inc = sc.wait_incident(lambda r: r["verdict"] in ("HUNG", "UNRESPONSIVE"), 120)
        onset = wait_for(lambda: w.events("hang"), 10, what="hang event")[0]["t"]
        action = wait_for(lambda: sc.incidents("action"), 60, what="action")[0]
        diag = inc.get("diagnosis") or {}
        named = diag.get("culprits") == [hang_rank]
        where = (diag.get("where") or {}).get(str(hang_rank), "")
        latency = inc["time"] - onset
        return {
            "latency_s": latency,
            "rule": inc["rule"],
            "ranks": inc["ranks"],
            "hang_rank": hang_rank,
            "kind": diag.get("kind"),
            "named": named,
            "targets": inc["targets"],
            "where": where,
            "stacks_method": (diag.get("stacks") or {}).get(str(hang_rank), {}).get("method"),
            "named_where_s": latency + float(diag.get("stacks_s") or 0.0) if where else None,
            "killed": action.get("ok", False),
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--stall-timeout-s", type=float, default=5.0)
    p.add_argument("--mode", choices=["sleep", "stop", "gil"], default="sleep")
    p.add_argument("--watch-ddp", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="")
    args = p.parse_args()
    rng = random.Random(args.seed)
    results = []
    for i in range(args.trials):
        r = trial(
            args.ranks,
            args.mode,
            args.stall_timeout_s,
            rng.randint(20, 60),
            rng.randrange(args.ranks),
            args.watch_ddp,
        )
        results.append(r)
        print(f"trial {i}: {r}", flush=True)
    lat = [r["latency_s"] for r in results]
    over = [x - args.stall_timeout_s for x in lat]
    where = [r["named_where_s"] for r in results if r["named_where_s"] is not None]
    summary = {
        "mode": args.mode,
        "watch_ddp": args.watch_ddp,
        "named": sum(r["named"] for r in results),
        "named_where_median_s": statistics.median(where) if where else None,
        "named_where_max_s": max(where) if where else None,
        "trials": args.trials,
        "stall_timeout_s": args.stall_timeout_s,
        "median_s": statistics.median(lat),
        "max_s": max(lat),
        "median_over_threshold_s": statistics.median(over),
        "max_over_threshold_s": max(over),
        "all_killed": all(r["killed"] for r in results),
        "trial_results": results,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "trial_results"}, indent=2))
    print(
        f"| {args.mode}, {args.ranks} ranks, stall_timeout_s={args.stall_timeout_s:g} | "
        f"{args.trials} | {summary['median_s']:.3f} s | {summary['max_s']:.3f} s | "
        f"{summary['max_over_threshold_s'] * 1000:+.0f} ms |"
    )
    if where:
        print(
            f"| {args.mode}{' + watch_ddp' if args.watch_ddp else ''} | {args.trials} | "
            f"{summary['named']}/{args.trials} | {summary['median_s']:.3f} s | "
            f"{summary['named_where_median_s']:.3f} s | {summary['named_where_max_s']:.3f} s |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
