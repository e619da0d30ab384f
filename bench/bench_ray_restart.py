"""Ray Train: how fast a hung rank is killed, and how fast Ray Train resumes.

Each trial runs ``examples/ray_train_job.py`` in a TorchTrainer (2 CPU gloo
workers) on an embedded local Ray, with the per-node sidecar actor
(``on_hung=restart``, explicit stall threshold). Rank 1 hangs inside step
``--hang-at``; the sidecar kills both workers through Ray; Ray Train restarts
the group from the latest checkpoint.

Measured from outside (wall clock, this machine), per trial:

- onset -> kill: from the hang (the worker logs it right before it sleeps)
  to the hung process being gone (this script polls its pid every 10 ms).
  Goal: <= stall threshold + 1 s. Split into detection (the incident's own
  ``detection_latency_s``, last step -> verdict) and the kill itself;
- kill -> resumed: from the hung process gone to the first step past the
  restored checkpoint. This is Ray's restart time, reported separately.

``--baseline-s N`` adds a last run with no sidecar, to see whether Ray Train
alone notices the hang within N seconds.

    python bench/bench_ray_restart.py --trials 3 --baseline-s 60
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def setup_paths(workdir: Path) -> None:
    roots = [str(REPO / d) for d in ("proto", "hooks", "sidecar")] + [str(EXAMPLES)]
    for root in reversed(roots):
        if root not in sys.path:
            sys.path.insert(0, root)
    os.environ["PYTHONPATH"] = os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")])
    os.environ["TRAINPROBE_RUNTIME_DIR"] = str(workdir / "run")
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pid_running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def wait_event(job: Any, progress: Path, pred: Any, timeout_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        hit = next((e for e in job.read_events(progress) if pred(e)), None)
        if hit is not None:
            return hit
        time.sleep(0.01)
    return None


def run_trial(job: Any, workdir: Path, name: str, cfg: dict[str, Any], log: Path) -> dict:
    """One hung run; returns the measured times in seconds."""
    from trainprobe.sidecar.act.incident_log import read_incident_log

    progress = workdir / f"{name}.jsonl"
    trainer = job.make_trainer(
        {**cfg, "progress": str(progress)}, str(workdir / "storage"), name, max_failures=1
    )
    out: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: out.setdefault("result", trainer.fit()), daemon=True)
    runner.start()
    hang = wait_event(job, progress, lambda e: e["event"] == "hang", 300)
    assert hang is not None, "the hang never happened"
    while pid_running(hang["pid"]):
        time.sleep(0.01)
    gone = time.time()
    restart = wait_event(job, progress, lambda e: e["event"] == "start" and e["restored_step"], 300)
    assert restart is not None, "Ray Train did not restart the group"
    resumed = wait_event(
        job,
        progress,
        lambda e: e["event"] == "step" and e["t"] > gone and e["step"] > restart["restored_step"],
        300,
    )
    assert resumed is not None
    runner.join(300)
    result = out.get("result")
    assert result is not None and result.error is None, "the run did not finish"
    records = [r for r in read_incident_log(log) if r.get("job_id") == name]
    (inc,) = [r for r in records if r["type"] == "incident"]
    (action,) = [r for r in records if r["type"] == "action"]
    assert all(o["method"] == "ray.kill" for o in action["outcomes"].values())
    recovery = [r["resumed_after_s"] for r in records if r["type"] == "recovery"]
    return {
        "onset_to_kill_s": gone - hang["t"],
        "detection_latency_s": inc["detection_latency_s"],
        "kill_to_resumed_s": resumed["t"] - gone,
        "sidecar_kill_to_resumed_s": min(recovery) if recovery else None,
        "restored_step": restart["restored_step"],
    }


def run_baseline(job: Any, workdir: Path, cfg: dict[str, Any], wait_s: float) -> dict:
    """No sidecar: does Ray Train notice the hang by itself within ``wait_s``?"""
    progress = workdir / "baseline.jsonl"
    trainer = job.make_trainer(
        {**cfg, "progress": str(progress)}, str(workdir / "storage"), "baseline", max_failures=1
    )
    threading.Thread(target=trainer.fit, daemon=True).start()
    hang = wait_event(job, progress, lambda e: e["event"] == "hang", 300)
    assert hang is not None
    restart = wait_event(
        job, progress, lambda e: e["event"] == "start" and e["restored_step"], wait_s
    )
    return {
        "waited_s": wait_s,
        "hung_pid_alive": pid_running(hang["pid"]),
        "restarted": restart is not None,
    }


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--stall-timeout-s", type=float, default=3.0)
    p.add_argument("--hang-at", type=int, default=13)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--baseline-s", type=float, default=0.0, help="0: no baseline run")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tp-bench-ray-"))
    setup_paths(workdir)
    import logging

    import ray
    import ray_train_job as job

    from trainprobe.sidecar import load_settings
    from trainprobe.sidecar.ray import start_sidecars, stop_sidecars

    cfg = {"steps": args.steps, "step_s": 0.05, "ckpt_every": 5, "hang_rank": 1}
    cfg["hang_at"] = args.hang_at
    ray.init(num_cpus=2, log_to_driver=False, logging_level=logging.ERROR)
    trials, baseline = [], None
    try:
        settings = load_settings(
            env={},
            cli={
                "stall_timeout_s": str(args.stall_timeout_s),
                "on_hung": "restart",
                "state_dir": str(workdir / "state"),
                "log_level": "warning",
            },
        )
        (node,) = start_sidecars(settings)
        for i in range(args.trials):
            t = run_trial(job, workdir, f"trial{i}", cfg, Path(node.incident_log))
            trials.append(t)
            print(json.dumps({"trial": i, **t}), flush=True)
        stop_sidecars()
        if args.baseline_s > 0:
            baseline = run_baseline(job, workdir, cfg, args.baseline_s)
            print(json.dumps({"baseline": baseline}), flush=True)
    finally:
        ray.shutdown()
    summary = {
        "stall_threshold_s": args.stall_timeout_s,
        "trials": len(trials),
        "onset_to_kill_s_median": median([t["onset_to_kill_s"] for t in trials]),
        "onset_to_kill_s_max": round(max(t["onset_to_kill_s"] for t in trials), 3),
        "goal_s": args.stall_timeout_s + 1.0,
        "detection_latency_s_median": median([t["detection_latency_s"] for t in trials]),
        "kill_to_resumed_s_median": median([t["kill_to_resumed_s"] for t in trials]),
        "baseline": baseline,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "trials": trials}, indent=2))
    return 0 if summary["onset_to_kill_s_max"] <= summary["goal_s"] else 1


if __name__ == "__main__":
    sys.exit(main())
