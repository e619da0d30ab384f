"""Scale of one sidecar on one core: reports/s, report→verdict lag, memory, vs N.

    python bench/bench_scale.py [--workers 250,500,750,1000,1250,1500,2000,2500,3000]
        [--hz 10] [--duration 10] [--generators 2] [--profile-workers 1000]
        [--telemetry off|on] [--relay-workers-per-node K] [--relay-interval-ms 500]
        [--issue-times K] [--before-src DIR]
        [--quick] [--json OUT]

What the sidecar costs per report, telemetry on, at job scale (issue 15):

    python bench/bench_scale.py --telemetry on --relay-workers-per-node 8 \
        --workers 1000 --issue-times 8 --duration 8 \
        --warmup 2 --profile-workers 0 --before-src /tmp/before

For each N, a fresh sidecar process is pinned to CPU 0 (every thread of it:
the asyncio loop and gRPC's own threads) and ``--generators`` load-generator
processes (bench/harness/loadgen.py) pinned to the other CPUs simulate N workers of
one job reporting at ``--hz`` over the real gRPC path (Unix socket, one
stream per worker). The sidecar runs with every action set to ``observe``,
and with its OpenTelemetry export off (``--telemetry off``, the liveness path
alone) or as shipped (``--telemetry on``: spans and metrics as OTLP-JSON
lines in its state directory).

Measured over a window of ``--duration`` seconds after a warm-up:

- processed reports/s: the sidecar's own view (the sum of every worker's last
  step from ``GetStatus`` at both ends of the window, divided by the steps per
  report), next to what the generators sent;
- the sidecar's CPU use (user+system from /proc, a fraction of one core), and
  reports processed per CPU-second (its capacity at that per-report cost, even
  when other processes on CPU 0 left it less than the whole core);
- the lag from report to verdict: probe workers send, once a second, a report
  implying a HUNG verdict; lag = incident time - send time (tick every 100 ms);
- RSS, and memory per worker = (RSS - RSS with no worker) / N.

With ``--relay-workers-per-node K`` (relayed mode) the generators are
bench/harness/relay_loadgen.py instead: they simulate node sidecars in relay mode,
each one ``Relay`` stream for K workers reporting at ``--hz``, sending one
``RelayBatch`` every ``--relay-interval-ms`` (the node's ``relay_interval_ms``)
that carries every report its workers made since the previous batch (K x
interval x hz reports), so the measured sidecar is the upstream of a relay
topology. A probe report's lag then counts from when its node sent
the batch carrying it (the upstream's receipt, give or take the socket), and
is also given from when its hook made it (``lag_from_hook_*``: that adds the
node's batching delay, 0 to one interval, which is not the upstream's doing).

A level is *sustained* when the sidecar processed ≥ 97% of what was sent and
the probes' p99 lag is ≤ 200 ms, with no probe left without a verdict.

The sidecar's CPU per report (``sidecar_cpu_us_per_report``; its inverse,
``reports_per_cpu_s``) is utime+stime of the sidecar's pid from
/proc/<pid>/stat over the window, divided by the reports the sidecar itself
ingested in it (its ``GetStatus`` step counts, above), so it does not matter
how many reports the generators managed to send. For the telemetry figure use
the relayed mode (``--relay-workers-per-node``): one generator process
simulates many node sidecars, each sending one ``RelayBatch`` per interval
for its workers, which is both how a job-scale sidecar receives reports (as a
relay upstream) and cheap enough to send that 2 generator processes on the
second core sent 20,000-25,000 reports/s (bench/results/scale_relay_200ms.json);
with direct streams (one gRPC message per report) they managed about 3,800 of
6,000 reports/s at 600 workers (issue 15).
``--issue-times K`` makes every simulated rank report K collective issue
times per report (as ``watch_ddp`` does), so arrival-lag comparisons run.

``--before-src DIR`` runs, for each level, the sidecar of another checkout
(its ``sidecar/`` first on the path; wire and generators from this one)
right before this checkout's: a before/after pair in one run. One level's
run and measurement is bench/harness/scale_level.py's.

Then one more run at ``--profile-workers`` records the sidecar with py-spy
(100 samples/s, non-blocking) over the window: where its one core goes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.common import REPO, add_repo_to_path, write_result
from harness.scale_level import STEPS_PER_REPORT, run_level

add_repo_to_path()

import grpc  # noqa: E402

from tests.support import short_tmpdir  # noqa: E402
from trainprobe.sidecar.config.settings import Settings  # noqa: E402

RATE_GOAL = 20_000


def profile_summary(raw: Path) -> dict[str, Any]:
    """Self shares per frame and inclusive shares per function, from py-spy's raw stacks."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf = frames[-1].replace(str(REPO) + "/", "")
        own[leaf] = own.get(leaf, 0) + n
        for fn in {f.split(" (")[0] for f in frames}:
            incl[fn] = incl.get(fn, 0) + n
    top = sorted(own.items(), key=lambda kv: -kv[1])[:12]
    keys = (
        "SidecarServicer._read",
        "SidecarServicer.handle",
        "RelayUpstream._read",
        "report_from_pb",
        "Registry.apply",
        "validate_report",
        "p99",
        "Engine.tick",
        "Telemetry.on_report",
        "BatchProcessor.worker",
        "TraceBuilder.on_report",
        "Histogram.record",
        "FoldedHistogram.record",
        "ArrivalTracker.observe",
        "ArrivalTracker.sweep",
    )
    return {
        "samples": total,
        "self_top": [{"frame": f, "share": v / max(total, 1)} for f, v in top],
        "inclusive": {k: incl.get(k, 0) / max(total, 1) for k in keys},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", default="250,500,750,1000,1250,1500,2000,2500,3000")
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument(
        "--connect-timeout-s",
        type=float,
        default=900.0,
        help="how long the generators may take to connect every worker and send its first report",
    )
    p.add_argument("--probes", type=int, default=2, help="probe workers per generator")
    p.add_argument("--profile-workers", type=int, default=1000, help="0: no profile")
    p.add_argument("--telemetry", choices=["off", "on"], default="off")
    p.add_argument(
        "--relay-workers-per-node",
        type=int,
        default=0,
        help="relayed mode: simulated relay nodes of K workers each (0: direct Connect streams)",
    )
    p.add_argument(
        "--relay-interval-ms",
        type=float,
        default=float(Settings().relay_interval_ms),
        help="relayed mode: each node's relay_interval_ms: one batch per interval, carrying "
        "every report its workers made since the previous one",
    )
    p.add_argument(
        "--issue-times",
        type=int,
        default=0,
        help="collective issue times per report (arrival-lag comparisons)",
    )
    p.add_argument(
        "--before-src",
        default="",
        help="A/B: also run, before each level of this checkout, the sidecar of this other "
        "checkout (e.g. `git worktree add /tmp/before main`)",
    )
    p.add_argument("--quick", action="store_true", help="N = 100 and 500, 4 s windows")
    p.add_argument("--json", default="")
    args = p.parse_args()
    levels = [int(x) for x in args.workers.split(",")]
    if args.quick:
        levels, args.duration, args.profile_workers = [100, 500], min(args.duration, 4.0), 100
    cpus = sorted(os.sched_getaffinity(0))
    gen_cpus = set(cpus[1:]) or {cpus[0]}
    started = time.monotonic()
    rows = []
    failed: list[dict[str, Any]] = []
    variants = [("before", args.before_src), ("after", "")] if args.before_src else [("", "")]
    for n, (variant, src) in ((n, v) for n in levels for v in variants):
        try:
            row = {"variant": variant, **run_level(n, args, gen_cpus, src=src)}
        except (RuntimeError, grpc.RpcError, subprocess.TimeoutExpired) as err:
            # A level the sidecar cannot even take on: no point going higher
            # (with --before-src, the other tree still gets its try).
            print(f"{variant} N={n:5}: {err}", flush=True)
            failed.append({"workers": n, "variant": variant, "error": str(err)})
            if not args.before_src:
                break
            continue
        rows.append(row)
        print(
            f"{variant}{' ' if variant else ''}N={n:5}: sent {row['sent_per_s']:8.0f}/s "
            f"processed {row['processed_per_s']:8.0f}/s "
            f"sidecar cpu {row['sidecar_cpu']:.2f} "
            f"({row['sidecar_cpu_us_per_report']:.1f} µs/report) "
            f"lag p50 {row['lag_p50_s'] * 1000:.0f} ms "
            f"p99 {row['lag_p99_s'] * 1000:.0f} ms "
            + (
                f"(from hook p99 {row['lag_from_hook_p99_s'] * 1000:.0f} ms) "
                if "lag_from_hook_p99_s" in row
                else ""
            )
            + f"false incidents {row['false_incidents']} (lost streams {row['streams_lost']}) "
            + f"shed {row['reports_shed']} "
            + f"rss {row['rss_bytes'] / 2**20:.0f} MiB "
            f"({row['bytes_per_worker'] / 1024:.1f} KiB/worker) sustained={row['sustained']}",
            flush=True,
        )
    profile = None
    profiles = {}
    for variant, src in variants if args.profile_workers else ():
        raw = Path(short_tmpdir("tpspy-")) / "sidecar.txt"
        row = run_level(args.profile_workers, args, gen_cpus, profile=raw, src=src)
        profile = {"workers": args.profile_workers, "level": row, **profile_summary(raw)}
        profiles[variant] = profile
        print(f"profile {variant}:", {k: f"{v:.1%}" for k, v in profile["inclusive"].items()})
        for item in profile["self_top"][:8]:
            print(f"  {item['share']:6.1%} {item['frame']}")
    ok = [r for r in rows if r["sustained"]]
    best = max((r["processed_per_s"] for r in ok), default=0.0)
    data = {
        "params": {k: v for k, v in vars(args).items() if k != "json"},
        "steps_per_report": STEPS_PER_REPORT,
        "sidecar_cpus": [0],
        "generator_cpus": sorted(gen_cpus),
        "levels": rows,
        "failed_levels": failed,
        "profile": profile,
        "profiles": profiles,
        "telemetry": args.telemetry,
        "mode": "relay" if args.relay_workers_per_node else "direct",
        "relay_workers_per_node": args.relay_workers_per_node,
        "relay_interval_ms": args.relay_interval_ms if args.relay_workers_per_node else None,
        "max_sustained_per_s": best,
        "goal_per_s": RATE_GOAL,
        "goal_met": best >= RATE_GOAL,
    }
    print(f"most reports/s sustained on one core: {best:.0f} (goal {RATE_GOAL})")
    if args.json:
        write_result(args.json, "scale", data, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
