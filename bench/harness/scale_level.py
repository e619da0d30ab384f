"""One level of bench/bench_scale.py: a fresh sidecar pinned to CPU 0, its load
generators (bench/harness/loadgen.py, or bench/harness/relay_loadgen.py in relayed mode) on
the other CPUs, one measured window, and what the sidecar made of it.

:func:`run_level` returns the level's row of the result (rates, the sidecar's
CPU per report, report-to-verdict lags, memory, false incidents); the module
docstring of bench/bench_scale.py says how each figure is measured.
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

from harness.common import add_repo_to_path, cpu_seconds, percentile, rss_bytes, sidecar_env

add_repo_to_path()

import grpc  # noqa: E402

from tests.support import PYTHON, SidecarProcess, child_env, short_tmpdir  # noqa: E402
from trainprobe.proto import probe_pb2, probe_pb2_grpc  # noqa: E402

__all__ = ["LAG_GOAL_S", "STEPS_PER_REPORT", "run_level"]

HERE = Path(__file__).resolve().parent
STEPS_PER_REPORT = 2
LAG_GOAL_S = 0.2


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
        # What the sidecar shed as too late to apply in full (core/session/overload.py).
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
