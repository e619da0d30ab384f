"""Where a Ray Train restart's time goes: one trial of bench/harness/ray_restart.py.

    python bench/probes/ray_restart_breakdown.py RAY_SESSION_DIR PROGRESS.jsonl [--killed-s S]

(``RAY_SESSION_DIR``: the run's ``/tmp/ray/session_*``; ``PROGRESS.jsonl``:
the trial's ``/tmp/tp-bench-ft-ray-*/ddpN.jsonl``.)

Reads the trial's progress events (examples/ray_train_job.py: hang, begin,
prepared, start, step) and the Ray Train controller's own log of that run
(``<session>/logs/train/ray-train-sys-controller-*.log``, JSON lines, on
by default in Ray Train V2: its failure decision, the old group's shutdown,
the new placement group, worker actors, train context, train function
launched) and prints each phase's time from the hang's onset and its own
duration. ``--killed-s``: the kill as the bench saw it (the trial's
``killed_s``).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

__all__ = ["phases"]

#: The controller's log lines that mark a phase's end, in order.
CONTROLLER = (
    ("controller sees the failure", "[FailurePolicy] RETRY"),
    ("old group shut down", "Worker group shutdown successful"),
    ("placement group ready", "Placement group ready"),
    ("worker actors created", "worker actors created"),
    ("train context initialized", "Train context initialized"),
    ("process group (backend) set up", "after_worker_group_start callbacks"),
    ("train function launched", "Train function launched"),
)
#: train_func's events (the latest rank's), in order.
WORKER = (
    ("train_func entered", "begin"),
    ("checkpoint restored, DDP made", "prepared"),
    ("hook made", "start"),
    ("first step", "step"),
)


def _lines(path: Path) -> list[tuple[float, str]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
            t = datetime.strptime(r["asctime"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        out.append((t, str(r.get("message", ""))))
    return out


def phases(session: Path, progress: Path, killed_s: float | None) -> list[tuple[str, float]]:
    rows = [json.loads(x) for x in progress.read_text().splitlines() if x.strip()]
    onset = next(float(r["t"]) for r in rows if r["event"] == "hang")
    logs = [_lines(p) for p in (session / "logs" / "train").glob("ray-train-sys-controller-*")]
    # The controller of this run: the first to decide on a failure after the onset
    # (a later run's controller decides later).
    decided = [
        (min(t for t, m in g if t >= onset and "[FailurePolicy]" in m), g)
        for g in logs
        if any(t >= onset and "[FailurePolicy]" in m for t, m in g)
    ]
    since, log = min(decided, key=lambda x: x[0]) if decided else (onset, [])
    out: list[tuple[str, float]] = [("onset", 0.0)]
    if killed_s is not None:
        out.append(("hung worker gone (the sidecar's kill)", killed_s))
    for name, needle in CONTROLLER:
        t = next((t for t, m in log if t >= since and needle in m), None)
        if t is not None:
            out.append((name, t - onset))
    for name, event in WORKER:
        firsts: dict[int, float] = {}
        for r in rows:
            if r["event"] == event and r["t"] > onset and r.get("restored_step", 1):
                firsts.setdefault(r["rank"], float(r["t"]))
        if firsts:
            out.append((f"{name} (every rank)", max(firsts.values()) - onset))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("session", type=Path)
    p.add_argument("progress", type=Path)
    p.add_argument("--killed-s", type=float)
    args = p.parse_args(argv)
    prev = 0.0
    print(f"{'phase':45} {'from onset':>10} {'took':>7}")
    for name, t in phases(args.session.resolve(), args.progress, args.killed_s):
        print(f"{name:45} {t:9.2f}s {t - prev:6.2f}s")
        prev = t
    return 0


if __name__ == "__main__":
    sys.exit(main())
