"""Recovery from a hung rank: replicated (torchft) with trainprobe, torchft alone, and the
non-replicated Ray Train and torchrun restarts, side by side in one run.

Sections (``--sections``, in this order; each trial is written out as it ends):

- ``faults`` (bench/harness/ft_local.py): two replica groups, each its own torchrun
  (docs/DEPLOY.md's recipe), a fault in replica ``train_1`` at a committed
  step: ``sleep`` in the step, ``lock`` (a deadlock), ``stop`` (SIGSTOP),
  ``kill9``, ``gil`` (a C call holding the GIL). Modes ``trainprobe`` (the
  sidecar CLI, shipped defaults) and ``alone`` (torchft by itself). Measured
  from onset: the survivor's next committed step and whether it kept its pid,
  the culprit gone, its replacement (restarted by its torchrun) committing.
- ``healthy``: one replica stalls 8 s and resumes; a declared 15 s
  checkpoint; an eval on every replica: evictions and kills (goal: 0).
- ``ray``: Ray Train + TorchftConfig (bench/harness/ft_ray.py): the same, plus the
  replacement's parameters against the survivor's and how often each worker
  started (a single-group replacement), and where the survivor's time goes
  (onset to incident, the kill, culprit gone to the survivor's commit).
  ``--ray-lighthouse``: ``trainprobe`` (``trainprobe.hooks.ray_train.torchft_config``)
  and/or ``ray`` (Ray's own example, torchft's lighthouse defaults).
  ``--ray-shape``: under trainprobe's lighthouse, ``replicate`` (the default:
  examples/ray_replicated.py, the loop with ``replicate(hook, model, opt)``
  users write; ``--ray-groups`` 2 or 4 workers, the middle one faulting; every
  survivor measured, the slowest is the trial's) or ``by-hand`` (Ray's
  example's ``train_func`` wired by hand, examples/ray_torchft_job.py, 2
  workers, where the replacement's ``train_func`` entry is also measured).
  Ray's example's lighthouse is always its own hand-wired shape.
- ``restart``: no replicas, shipped defaults: a rank sleeps in its step
  (``--restart-hangs``: Ray Train's also ``stop``, a SIGSTOP); the sidecar
  kills, Ray Train (``examples/ray_train_job.py``,
  bench/harness/ray_restart.py) or torchrun ``--max-restarts``
  (``examples/torchrun_train.py``) restarts every rank from the last
  checkpoint: onset to the kill, to every rank stepping again, steps redone
  (``--restart-stacks`` picks the orchestrators).

Goals (docs/PERFORMANCE.md): survivors commit again <= 5 s after onset for
definitive faults, <= 15 s for ambiguous ones, same pid; the Ray Train
replacement steps <= 20 s after onset with equal parameters; 0 evictions in
the healthy cases, 0 kills of a waiting replica anywhere. Ray Train's
survivors (``survivor_goal_s``): the torchrun figures of issue 35, <= 3 s
definitive, <= 12 s ambiguous, same pid, one group replaced.

    python bench/bench_torchft.py --trials 3
    python bench/bench_torchft.py --sections ray --ray-faults stop,sleep --ray-shape by-hand \
        --ray-lighthouse trainprobe,ray --trials 3 --out bench/results/torchft_ray.json
    python bench/bench_torchft.py --sections ray --ray-faults stop --ray-groups 4 \
        --trials 3 --out bench/results/torchft_ray_4groups.json
    python bench/bench_torchft.py --sections restart --restart-stacks ray_train \
        --restart-hangs stop,sleep --trials 10 --out bench/results/ray_restart.json

Results: bench/results/torchft.json (medians per case, every trial, the
machine's load average before and after, and each trial's own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from harness.ft_local import HEALTHY, fault_trial, healthy_trial, torchrun_restart_trial  # noqa: E402

from trainprobe.proto.lighthouse import HEARTBEAT_TIMEOUT_MS, JOIN_TIMEOUT_MS  # noqa: E402

FAULTS = ("sleep", "lock", "gil", "stop", "kill9")
DEFINITIVE = ("stop", "kill9")
SECTIONS = ("faults", "healthy", "ray", "restart")
MEASURES = ("survivor_resumed_s", "culprit_gone_s", "replacement_stepping_s")
RAY_MEASURES = (
    *MEASURES,
    "replacement_begin_s",
    "replacement_start_s",
    "incident_s",
    "kill_s",
    "survivor_after_gone_s",
)
#: The survivors' goals (issue 35): definitive faults, ambiguous ones.
RAY_SURVIVOR_GOAL_S = {"stop": 3.0, "sleep": 12.0}


def median(xs: list[Any]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float))]
    return round(statistics.median(vals), 2) if vals else None


def _ray_key(r: dict[str, Any]) -> str:
    """``sleep`` under trainprobe's lighthouse settings; ``sleep/ray`` under Ray's example's."""
    lighthouse = r.get("lighthouse", "trainprobe")
    return r["fault"] if lighthouse == "trainprobe" else f"{r['fault']}/{lighthouse}"


def _span(rs: list[dict[str, Any]]) -> list[float] | None:
    """The fastest and the slowest survivor over every trial."""
    every = [x for r in rs for x in (r.get("survivors_resumed_s") or {}).values() if x is not None]
    every = every or [r["survivor_resumed_s"] for r in rs if r.get("survivor_resumed_s")]
    return [min(every), max(every)] if every else None


def _restart_key(r: dict[str, Any]) -> str:
    """``ray_train`` for a sleeping rank (as before hangs were named), ``ray_train/stop``."""
    hang = r.get("hang", "sleep")
    return r["orchestrator"] if hang == "sleep" else f"{r['orchestrator']}/{hang}"


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    t = doc["trials"]
    faults: dict[str, Any] = {}
    for r in t["faults"]:
        key = f"{r['fault']}/{r['mode']}"
        faults.setdefault(key, []).append(r)
    out: dict[str, Any] = {"faults": {}, "healthy": {}, "ray": {}, "restart": {}}
    for key, rs in faults.items():
        out["faults"][key] = {
            "trials": len(rs),
            **{m: median([r.get(m) for r in rs]) for m in MEASURES},
            "survivor_same_pid": all(r.get("survivor_same_pid") for r in rs),
            "evictions": sum(r.get("evictions", 0) for r in rs),
            "waiting_replica_kills": sum(r.get("waiting_replica_kills", 0) for r in rs),
            "goal_s": 5.0 if key.split("/")[0] in DEFINITIVE else 15.0,
        }
    for case in {r["case"] for r in t["healthy"]}:
        rs = [r for r in t["healthy"] if r["case"] == case]
        out["healthy"][case] = {
            "trials": len(rs),
            "evictions": sum(r.get("evictions", 0) for r in rs),
            "kills": sum(r.get("kills", 0) for r in rs),
            "waiting_replica_kills": sum(r.get("waiting_replica_kills", 0) for r in rs),
            "finished": all(r.get("finished") and r.get("same_pids") for r in rs),
            "stall_s": median([s for r in rs for s in r.get("stalls_seen_s") or []]),
        }
    for key in {_ray_key(r) for r in t["ray"]}:
        rs = [r for r in t["ray"] if _ray_key(r) == key]
        out["ray"][key] = {
            "trials": len(rs),
            **{m: median([r.get(m) for r in rs]) for m in RAY_MEASURES},
            "survivor_same_pid": all(r.get("survivor_same_pid") for r in rs),
            "params_equal": all(r.get("params_equal") for r in rs),
            "single_group_replacement": all(r.get("single_group_replacement") for r in rs),
            "evictions": sum(r.get("evictions", 0) for r in rs),
            "other_kills": sum(r.get("other_kills", 0) for r in rs),
            "survivor_resumed_max_s": max(
                (r["survivor_resumed_s"] for r in rs if r.get("survivor_resumed_s") is not None),
                default=None,
            ),
            "survivors_resumed_s_range": _span(rs),
            "shape": rs[0].get("shape", "by-hand"),
            "groups": rs[0].get("groups", 2),
            "failed_trials": sum(1 for r in rs if r.get("error") or not r.get("run_ok", True)),
            "survivor_goal_s": RAY_SURVIVOR_GOAL_S.get(key.split("/")[0]),
            "goal_s": 20.0,
        }
    for key in {_restart_key(r) for r in t["restart"]}:
        rs = [r for r in t["restart"] if _restart_key(r) == key]
        back = [r["all_stepping_s"] for r in rs if r.get("all_stepping_s") is not None]
        out["restart"][key] = {
            "trials": len(rs),
            "all_stepping_s": median(back),
            "all_stepping_max_s": max(back, default=None),
            "killed_s": median([r.get("killed_s") for r in rs]),
            "steps_redone": median([r.get("steps_redone") for r in rs]),
            "errors": [r["error"] for r in rs if r.get("error") or r.get("ok") is False],
            "patience_s": median([r.get("patience_s") for r in rs]),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--modes", default="trainprobe,alone")
    p.add_argument("--healthy", default=",".join(HEALTHY))
    p.add_argument("--ray-faults", default="sleep")
    p.add_argument("--ray-lighthouse", default="trainprobe", help="trainprobe,ray")
    p.add_argument("--ray-shape", choices=("replicate", "by-hand"), default="replicate")
    p.add_argument("--restart-stacks", default="torchrun,ray_train")
    p.add_argument("--restart-hangs", default="sleep", help="sleep,stop (stop: Ray Train only)")
    p.add_argument("--ray-groups", type=int, choices=(2, 4), default=2, help="replicate only")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--launcher", choices=("torchrun", "plain"), default="torchrun")
    p.add_argument("--fault-at", type=int, default=15)
    p.add_argument("--limit-s", type=float, default=90.0)
    p.add_argument("--restart-limit-s", type=float, default=400.0)
    p.add_argument("--ray-steps", type=int, help="400 by hand; replicate 300, 4 groups 500")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=HEARTBEAT_TIMEOUT_MS)
    p.add_argument("--join-timeout-ms", type=int, default=JOIN_TIMEOUT_MS)
    p.add_argument(
        "--burn", type=int, default=0, help="busy-loop processes run alongside (a loaded machine)"
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "torchft.json")
    args = p.parse_args()
    sections = [s for s in SECTIONS if s in args.sections.split(",")]
    doc: dict[str, Any] = {
        "command": "python " + " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "trials": {s: [] for s in SECTIONS},
    }
    started = time.time()
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burn)
    ]
    try:
        run(args, sections, doc, started)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    print(json.dumps(doc.get("summary"), indent=2))


def run(args: argparse.Namespace, sections: list[str], doc: dict[str, Any], started: float) -> None:

    def add(section: str, r: dict[str, Any]) -> None:
        print(json.dumps({"section": section, **r}), flush=True)
        doc["trials"][section].append(r)
        doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
        doc["wall_s"] = round(time.time() - started, 1)
        doc["summary"] = summarize(doc)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")

    for _ in range(args.trials):  # trials interleaved: a load spike spreads over cases
        if "faults" in sections:
            for fault in args.faults.split(","):
                for mode in args.modes.split(","):
                    add("faults", fault_trial(fault, mode, args))
        if "healthy" in sections:
            for case in args.healthy.split(","):
                add("healthy", healthy_trial(case, args))
        if "restart" in sections and "torchrun" in args.restart_stacks.split(","):
            add("restart", torchrun_restart_trial(args))
    if "ray" in sections or "restart" in sections:
        from harness.ft_ray import RaySession

        work = Path(tempfile.mkdtemp(prefix="tp-bench-ft-ray-"))
        session = RaySession(work, num_cpus=max(2, args.ray_groups))
        try:
            for _ in range(args.trials):
                if "ray" in sections:
                    for fault in args.ray_faults.split(","):
                        for lh in args.ray_lighthouse.split(","):
                            add("ray", ray_trial(session, args, fault, lh))
                if "restart" in sections and "ray_train" in args.restart_stacks.split(","):
                    for hang in args.restart_hangs.split(","):
                        add("restart", session.restart_trial(hang))
        finally:
            session.close()


def ray_trial(session: Any, args: argparse.Namespace, fault: str, lh: str) -> dict[str, Any]:
    if lh == "trainprobe" and args.ray_shape == "replicate":
        # The one-liner's survivors train on until the replaced group rejoins; with 4
        # groups, one may wait out torchft's 30 s timeout first (docs/RAY.md).
        steps = args.ray_steps or (300 if args.ray_groups == 2 else 500)
        return session.replicate_trial(fault, args.ray_groups, steps, args.limit_s)
    trial = session.ft_trial(fault, args.ray_steps or 400, args.limit_s, lh)
    return {**trial, "shape": "by-hand"}


if __name__ == "__main__":
    main()
