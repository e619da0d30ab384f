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
processes (bench/loadgen.py) pinned to the other CPUs simulate N workers of
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
bench/relay_loadgen.py instead: they simulate node sidecars in relay mode,
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
right before this checkout's: a before/after pair in one run.

Then one more run at ``--profile-workers`` records the sidecar with py-spy
(100 samples/s, non-blocking) over the window: where its one core goes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import REPO, add_repo_to_path, cpu_seconds, percentile, rss_bytes, write_result

add_repo_to_path()

import grpc  # noqa: E402

from tests.support import PYTHON, SidecarProcess, child_env, short_tmpdir  # noqa: E402
from trainprobe.proto import probe_pb2, probe_pb2_grpc  # noqa: E402
from trainprobe.sidecar.config.settings import Settings  # noqa: E402

HERE = Path(__file__).resolve().parent
STEPS_PER_REPORT = 2
LAG_GOAL_S = 0.2
RATE_GOAL = 20_000


def step_sum(sc: SidecarProcess, attempts: int = 3) -> int:
    """The sum of every simulated worker's last step, as the sidecar knows it."""
    for attempt in range(attempts):
        try:
            with grpc.insecure_channel(sc.target) as ch:
                reply = probe_pb2_grpc.SidecarStub(ch).GetStatus(
                    probe_pb2.StatusRequest(job_id="load"), timeout=120
                )
            return sum(w.step for w in reply.workers)
        except grpc.RpcError as err:
            # A sidecar starved for many seconds (a loaded machine) can miss the
            # connection's setup: CANCELLED. Ask again; its counts are not lost.
            if attempt + 1 == attempts or err.code() not in (
                grpc.StatusCode.CANCELLED,
                grpc.StatusCode.UNAVAILABLE,
            ):
                raise
    raise AssertionError("unreachable")


def probe_lags(sends: dict[str, list[float]], incidents: list[dict]) -> list[float]:
    """Lag of each probe report to the first verdict after it (inf if none)."""
    lags = []
    for job, times in sends.items():
        verdicts = sorted(
            r["time"] for r in incidents if r.get("job_id") == job and r["verdict"] == "HUNG"
        )
        for i, t in enumerate(times):
            nxt = times[i + 1] if i + 1 < len(times) else math.inf
            hit = next((v for v in verdicts if t - 0.001 <= v < nxt), None)
            lags.append(math.inf if hit is None else hit - t)
    return lags


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


def sidecar_env(src: str) -> dict[str, str]:
    """Run the sidecar from another checkout's ``sidecar/`` (A/B in one run); the wire
    (proto) and the hooks stay this checkout's."""
    if not src:
        return {}
    roots = [str(Path(src) / "sidecar"), str(REPO / "proto"), str(REPO / "hooks")]
    return {"PYTHONPATH": os.pathsep.join(roots)}


def run_level(
    n: int,
    args: argparse.Namespace,
    gen_cpus: set[int],
    profile: Path | None = None,
    src: str = "",
) -> dict[str, Any]:
    workdir = short_tmpdir("tps-")
    flags = ["--on-hung", "observe", "--on-unresponsive", "observe", "--log-level", "warning"]
    flags.append("--telemetry" if args.telemetry == "on" else "--no-telemetry")
    sc = SidecarProcess(
        workdir, *flags, "--heartbeat-timeout-s", "30", env=sidecar_env(src), cpus={0}
    ).start(timeout_s=120)  # on a loaded machine its imports alone can take 30 s
    gens: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        time.sleep(1.0)
        rss_idle = rss_bytes(sc.proc.pid)
        stop = workdir / "stop"
        per = [n // args.generators + (i < n % args.generators) for i in range(args.generators)]
        offset = 0
        for g, count in enumerate(per):
            out = workdir / f"gen{g}.json"
            k = args.relay_workers_per_node
            script = ["loadgen.py"]
            if k:
                interval = str(args.relay_interval_ms)
                script = ["relay_loadgen.py", "--per-node", str(k), "--interval-ms", interval]
            cmd = [
                PYTHON,
                str(HERE / script[0]),
                *script[1:],
                *("--target", sc.target, "--workers", str(count), "--hz", str(args.hz)),
                *("--rank-offset", str(offset), "--world-size", str(n)),
                *("--ready", str(workdir / f"ready{g}"), "--stop", str(stop)),
                *("--probes", str(args.probes), "--steps-per-report", str(STEPS_PER_REPORT)),
                *("--out", str(out)),
                *(("--issue-times", str(args.issue_times)) if args.issue_times else ()),
            ]
            offset += count
            gens.append(
                (
                    subprocess.Popen(
                        cmd,
                        env=child_env(),
                        preexec_fn=lambda: os.sched_setaffinity(0, gen_cpus),
                    ),
                    out,
                )
            )
        ready_by = time.monotonic() + args.connect_timeout_s
        while not all((workdir / f"ready{g}").exists() for g in range(len(gens))):
            if time.monotonic() > ready_by or any(p.poll() is not None for p, _ in gens):
                raise RuntimeError(f"N={n}: load generators did not get going")
            time.sleep(0.1)
        # Every worker's first report (with its window fill) applied: no backlog left.
        while step_sum(sc) < n * STEPS_PER_REPORT:
            if time.monotonic() > ready_by:
                raise RuntimeError(f"N={n}: the sidecar did not take every first report")
            time.sleep(0.2)
        time.sleep(args.warmup)
        s0, c0, t0 = step_sum(sc), cpu_seconds(sc.proc.pid), time.time()
        spy = None
        if profile is not None:
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    *("record", "--pid", str(sc.proc.pid), "--rate", "100", "--nonblocking"),
                    *("--duration", str(int(args.duration)), "--format", "raw"),
                    *("--output", str(profile)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        time.sleep(args.duration)
        s1, c1, t1 = step_sum(sc), cpu_seconds(sc.proc.pid), time.time()
        if spy is not None:
            spy.wait(60)
        rss = rss_bytes(sc.proc.pid)
        time.sleep(0.5)
        stop.touch()
        outs = []
        for proc, out in gens:
            proc.wait(120)
            outs.append(json.loads(out.read_text()))
        time.sleep(0.5)
        incidents = sc.incidents()
        s_end = step_sum(sc)
        try:
            ingest: Any = sc.status("load").ingest
        except grpc.RpcError:  # a sidecar too busy to answer in 5 s: counts unknown
            ingest = None
    finally:
        # A level that failed must not leave its generators running (they wait
        # for the stop file, which it never wrote).
        for proc, _ in gens:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        sc.stop()
    # Trace volume: spans the sidecar exported (OTLP-JSON lines, flushed at its stop)
    # per report it took over the whole run.
    traces = sc.state_dir / "traces.otlp.jsonl"
    spans = sum(
        len(ss.get("spans", ()))
        for line in (traces.read_text().splitlines() if traces.exists() else ())
        for rs in json.loads(line).get("resourceSpans", ())
        for ss in rs.get("scopeSpans", ())
    )
    b0, b1 = int(t0 * 10), int(t1 * 10)
    lost = {rank for o in outs for rank, _ in o.get("lost", ())}
    lost_at = [t for o in outs for _, t in o.get("lost", ())]
    load_incidents = [r for r in incidents if r.get("job_id") == "load"]
    sent = sum(v for o in outs for k, v in o["buckets"].items() if b0 <= int(k) < b1)
    sends: dict[str, list[float]] = {}
    made: dict[str, list[float]] = {}
    for o in outs:
        for job, ts in o["probe_sends"].items():
            inside = [i for i, t in enumerate(ts) if t0 <= t < t1]
            sends[job] = [ts[i] for i in inside]
            if "probe_made" in o:  # relayed: the same reports, from their hooks' making
                made[job] = [o["probe_made"][job][i] for i in inside]
    lags = probe_lags(sends, incidents)
    processed_rate = (s1 - s0) / STEPS_PER_REPORT / (t1 - t0)
    # The generators' counts cover the main job's and the probes' reports.
    load_sent_rate = sent / ((b1 - b0) / 10) * n / (n + args.probes * args.generators)
    lag_p99 = percentile(lags, 0.99)
    hook = {}
    if made:
        hook_lags = probe_lags(made, incidents)
        hook = {
            "lag_from_hook_p50_s": percentile(hook_lags, 0.5),
            "lag_from_hook_p99_s": percentile(hook_lags, 0.99),
        }
    return {
        "workers": n,
        "hz": args.hz,
        "offered_per_s": n * args.hz,
        "sent_per_s": load_sent_rate,
        "processed_per_s": processed_rate,
        "sidecar_cpu": (c1 - c0) / (t1 - t0),
        # Reports per second of sidecar CPU: what a whole core would sustain at this
        # per-report cost, whatever share of CPU 0 other processes left it.
        "reports_per_cpu_s": processed_rate / max((c1 - c0) / (t1 - t0), 1e-9),
        # The same as a cost: the sidecar's CPU per report, whatever the generators
        # managed to send (issue 15: on 2 cores they, not the sidecar, were the limit).
        "sidecar_cpu_us_per_report": (c1 - c0) / max(processed_rate * (t1 - t0), 1e-9) * 1e6,
        "generator_cpu_s": sum(o["cpu_s"] for o in outs),
        "lag_p50_s": percentile(lags, 0.5),
        "lag_p99_s": lag_p99,
        "lag_max_s": max(lags, default=math.nan),
        **hook,
        "probes_sent": len(lags),
        "probes_without_verdict": sum(1 for x in lags if math.isinf(x)),
        "rss_bytes": rss,
        "rss_idle_bytes": rss_idle,
        "bytes_per_worker": (rss - rss_idle) / n,
        "generator_errors": sum(o["n_errors"] for o in outs),
        # Incidents about the simulated job, which never hangs (goal: 0), except
        # those about ranks whose stream the generator itself lost (then the
        # sidecar is right: those ranks did stop reporting and went away).
        "false_incidents": sum(1 for r in load_incidents if not set(r["ranks"]) <= lost),
        "incidents_on_lost_streams": sum(1 for r in load_incidents if set(r["ranks"]) <= lost),
        "streams_lost": len(lost),
        # When, from the start of the measured window (s), the first and last were lost.
        "streams_lost_at_s": [
            round(min(lost_at) - t0, 1) if lost_at else None,
            round(max(lost_at) - t0, 1) if lost_at else None,
        ],
        "window_s": round(t1 - t0, 1),
        # What the sidecar said about streams that ended unasked, and its own troubles.
        "sidecar_log_examples": sidecar_log_examples(sc.log_path),
        "generator_error_examples": [e for o in outs for e in o["errors"]][:5],
        "false_incident_examples": [
            {k: r.get(k) for k in ("verdict", "rule", "ranks", "summary")}
            for r in load_incidents
            if not set(r["ranks"]) <= lost
        ][:3],
        # What the sidecar shed as too late to apply in full (core/overload.py).
        "reports_shed": ingest.shed if ingest is not None else None,
        "reports_applied_in_full": ingest.applied if ingest is not None else None,
        "max_ingest_lag_s": ingest.max_lag_s if ingest is not None else None,
        "spans_exported": spans,
        "spans_per_report": spans / max(s_end / STEPS_PER_REPORT, 1),
        "sustained": processed_rate >= 0.97 * load_sent_rate and lag_p99 <= LAG_GOAL_S,
    }


def sidecar_log_examples(path: Path, limit: int = 12) -> list[str]:
    """Distinct warnings and errors of the sidecar's log (numbers blanked to group them)."""
    if not path.exists():
        return []
    seen: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        if " WARNING " in line or " ERROR " in line or "Traceback" in line:
            key = re.sub(r"\d+", "N", line.split(" ", 3)[-1])[:100]
            seen.setdefault(key, line[:300])
    return list(seen.values())[:limit]


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
