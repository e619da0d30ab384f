"""A starved sidecar stays honest: every worker healthy, the sidecar behind.

    python bench/bench_starved.py [--workers 2000] [--hz 10] [--cpus 0,1]
        [--generators 2] [--real-workers 2] [--duration 60]
        [--hang-patience-s 0] [--hogs 0] [--telemetry off|on] [--before-src DIR]
        [--json OUT]

One sidecar with the shipped rules and actions (kill), ``--hang-patience-s``
as given (0: a verdict acts at once), ``--workers`` simulated workers of one
job reporting at ``--hz`` over real gRPC streams (bench/harness/loadgen.py, in
``--generators`` processes) and ``--real-workers`` real gloo ranks
(tests/workers/ddp_worker.py, a step every 0.1 s, reporting every 100 ms) of
another job, all pinned to the same ``--cpus``: a small machine whose
sidecar shares its cores with the load, as on a 2-core host (``--hogs`` busy
loops on the same CPUs stand for its other tenants). No worker ever
hangs, so every incident is false, and so is every signal to a real rank
(one that exits before the end was signalled: nothing else ends it).

Recorded: the incidents (with rule and evidence), whether each real rank
survived and how far it stepped, the sidecar's CPU use and its own account
of its load (``StatusReply.ingest``: shed reports, ingest lag, and whether it
knew it was behind and deferred verdicts), the freezes it logged.
``--before-src DIR`` runs another checkout's sidecar first on the same load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.common import add_repo_to_path, cpu_seconds, sidecar_env, write_result

add_repo_to_path()

import grpc  # noqa: E402

from tests.support import PYTHON, SidecarProcess, Workers, child_env, short_tmpdir  # noqa: E402
from trainprobe.proto import probe_pb2, probe_pb2_grpc  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER_ARGS = ["--steps", "1000000", "--step-s", "0.1", "--interval-ms", "100"]
REAL_JOB = "real"
SAMPLE_EVERY_S = 5.0


def ingest_of(sc: SidecarProcess, timeout_s: float = 3.0) -> dict[str, Any]:
    """The sidecar's own account of its load (the real ranks' job: a small reply)."""
    try:
        with grpc.insecure_channel(sc.target) as ch:
            reply = probe_pb2_grpc.SidecarStub(ch).GetStatus(
                probe_pb2.StatusRequest(job_id=REAL_JOB), timeout=timeout_s
            )
    except grpc.RpcError as err:  # too busy to answer
        return {"error": str(err.code())}
    ingest = reply.ingest
    out = {f.name: getattr(ingest, f.name) for f in ingest.DESCRIPTOR.fields}
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def run_once(args: argparse.Namespace, cpus: set[int], src: str) -> dict[str, Any]:
    workdir = short_tmpdir("tpst-")
    flags = ["--hang-patience-s", str(args.hang_patience_s), "--log-level", "warning"]
    flags.append("--telemetry" if args.telemetry == "on" else "--no-telemetry")
    sc = SidecarProcess(workdir, *flags, env=sidecar_env(src), cpus=cpus).start(timeout_s=180)
    taskset = ["taskset", "-c", ",".join(map(str, sorted(cpus)))]
    gens: list[tuple[subprocess.Popen[bytes], Path]] = []
    real: Workers | None = None
    stop = workdir / "stop"
    # Busy loops on the same CPUs: the other tenants of a shared small machine.
    hog = "import time\nwhile True: time.monotonic()"
    hogs = [subprocess.Popen([*taskset, PYTHON, "-c", hog]) for _ in range(args.hogs)]
    try:
        if args.real_workers:
            real = Workers(
                args.real_workers, sc.target, workdir, WORKER_ARGS, job_id=REAL_JOB, wrap=taskset
            )
        n, k = args.workers, args.generators
        per = [n // k + (i < n % k) for i in range(k)]
        offset = 0
        for g, count in enumerate(per):
            out = workdir / f"gen{g}.json"
            cmd = [
                *taskset,
                PYTHON,
                str(HERE / "harness" / "loadgen.py"),
                *("--target", sc.target, "--workers", str(count), "--hz", str(args.hz)),
                *("--rank-offset", str(offset), "--world-size", str(n)),
                *("--ready", str(workdir / f"ready{g}"), "--stop", str(stop), "--out", str(out)),
            ]
            offset += count
            gens.append((subprocess.Popen(cmd, env=child_env()), out))
        ready_by = time.monotonic() + args.connect_timeout_s
        while not all((workdir / f"ready{g}").exists() for g in range(len(gens))):
            if time.monotonic() > ready_by or any(p.poll() is not None for p, _ in gens):
                raise RuntimeError("load generators did not get going")
            time.sleep(0.2)
        real_steps0 = [real.max_step(r) for r in range(args.real_workers)] if real else []
        c0, t0 = cpu_seconds(sc.proc.pid), time.monotonic()
        samples = []
        while (left := t0 + args.duration - time.monotonic()) > 0:
            time.sleep(min(SAMPLE_EVERY_S, left))
            samples.append({"t": round(time.monotonic() - t0, 1), **ingest_of(sc)})
        c1, t1 = cpu_seconds(sc.proc.pid), time.monotonic()
        stopped_at = time.time()
        ingest = ingest_of(sc)
        alive = [p.poll() is None for p in real.procs] if real else []
        codes = [p.poll() for p in real.procs] if real else []
        real_steps1 = [real.max_step(r) for r in range(args.real_workers)] if real else []
        stop.touch()
        outs = []
        for proc, out in gens:
            proc.wait(180)
            outs.append(json.loads(out.read_text()) if out.exists() else {})
        incidents = sc.incidents()
        log = sc.log_text()
    finally:
        stop.touch()
        for proc, _ in gens:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        if real is not None:
            real.kill()
        for h in hogs:
            h.kill()
            h.wait(10)
        sc.stop()
    # Incidents before the stop are the run's; after it, the generators' streams
    # end at teardown (a starved one can end before its Goodbye is read).
    in_window = [r for r in incidents if r.get("time", 0) < stopped_at]
    return {
        "sidecar_src": src or "this checkout",
        "window_s": round(t1 - t0, 1),
        "sidecar_cpu": round((c1 - c0) / (t1 - t0), 3),
        "false_incidents": len(in_window),
        "teardown_incidents": len(incidents) - len(in_window),
        "incident_examples": [
            {
                "in_window": r in in_window,
                **{k: r.get(k) for k in ("job_id", "verdict", "rule", "detection_latency_s")},
                "ranks": len(r.get("ranks", ())),
                "evidence": dict(list((r.get("evidence") or {}).items())[:2]),
            }
            for r in incidents[:6]
        ],
        "real_workers_alive": alive,
        "real_worker_exit_codes": codes,
        "healthy_workers_signalled": sum(not a for a in alive),
        "real_worker_steps_in_window": [
            b - a for a, b in zip(real_steps0, real_steps1, strict=True)
        ],
        "generator_errors": sum(o.get("n_errors", 0) for o in outs),
        "streams_lost": sum(len(o.get("lost", ())) for o in outs),
        "ingest": ingest,
        "ingest_samples": samples,
        "freezes_logged": log.count("frozen or starved"),
        "behind_logged": log.count("behind its own"),
        "log_warnings": [ln[:300] for ln in log.splitlines() if "WARNING" in ln][:12],
    }


def main() -> None:
    started = time.monotonic()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=2000)
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--cpus", default="0,1", help="the CPUs everything is pinned to")
    p.add_argument("--generators", type=int, default=2)
    p.add_argument("--real-workers", type=int, default=2)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--hogs", type=int, default=0, help="busy-loop processes on the same CPUs")
    p.add_argument("--connect-timeout-s", type=float, default=240.0)
    p.add_argument("--hang-patience-s", default="0")
    p.add_argument("--telemetry", choices=("off", "on"), default="off")
    p.add_argument("--before-src", default="", help="another checkout's sidecar, run first")
    p.add_argument("--json", default="")
    args = p.parse_args()
    cpus = {int(c) for c in args.cpus.split(",")}
    runs = []
    for src in ([args.before_src] if args.before_src else []) + [""]:
        result = run_once(args, cpus, src)
        print(json.dumps(result, indent=1, default=str), flush=True)
        runs.append(result)
    if args.json:
        write_result(args.json, "starved", {"params": vars(args), "runs": runs}, started)


if __name__ == "__main__":
    main()
