"""Every stack comes back: onset to every rank stepping again after trainprobe's kill.

    python bench/bench_restart.py [--stacks plain,hf,lightning] [--modes stop,sleep]
                                  [--trials 10] [--json bench/results/restart.json]

Per stack (tests/restart_stacks.py: the plain script, the Hugging Face Trainer
with our callback, Lightning with our callback, strategy ddp), real
``torchrun --standalone --nproc-per-node 2 --max-restarts 1``, gloo on CPU, a
real sidecar on its shipped defaults (``--patience-s`` sets
``--hang-patience-s`` instead, and the result says so). On the first attempt
rank 1 hangs at step 13: ``stop`` SIGSTOPs itself (definitive evidence),
``sleep`` sleeps in its step (ambiguous: killed after the patience, 90 s by
default). A checkpoint every 5 steps.

Each trial measures, from the onset (the hang's own timestamp): the kill (the
hung process gone, polled every 20 ms), and every rank stepping again (the
latest of the ranks' first step in the restarted attempt). A trial fails when
torchrun does not exit 0 or a rank of the restarted attempt does not finish
at the last step. Work lost per restart: the steps the job had completed
before the hang minus the step the restarted attempt resumed from.

Goals (issue 34): 0 failed restarts; an ambiguous hang back within the
patience + 10 s; a definitive one within 12 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness.common import add_repo_to_path, pid_gone, write_result

add_repo_to_path()

from tests.restart_stacks import HANG_AT, STEPS, stack_args, torchrun  # noqa: E402
from tests.support import read_jsonl, short_tmpdir, sidecar  # noqa: E402

SHIPPED_PATIENCE_S = 90.0


def _watch_kill(progress: Path, stop: threading.Event, out: dict[str, float]) -> None:
    """The hung process's end, on the wall clock of the events (polled every 20 ms)."""
    pid = 0
    while not stop.is_set():
        if not pid:
            hang = [e for e in read_jsonl(progress) if e["event"] == "hang"]
            pid = hang[0]["pid"] if hang else 0
        elif pid_gone(pid):
            out["killed_at"] = time.time()
            return
        time.sleep(0.02)


def trial(stack: str, mode: str, patience_s: float | None) -> dict[str, Any]:
    work = short_tmpdir("tpr-")
    progress = work / "progress.jsonl"
    args = [*stack_args(stack, work, progress), "--hang-rank", "1", "--hang-at", str(HANG_AT)]
    args += ["--hang-how", mode]
    flags = ("--hang-patience-s", str(patience_s)) if patience_s is not None else ()
    seen: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_kill, args=(progress, stop, seen), daemon=True)
    rc: int | None = None
    started = time.monotonic()
    with sidecar(*flags) as sc:
        watcher.start()
        try:
            rc = torchrun(
                sc.target, args, timeout_s=300 + (patience_s or SHIPPED_PATIENCE_S)
            ).returncode
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            stop.set()
        kills = [a for a in sc.incidents("action") if a.get("outcomes")]
    events = read_jsonl(progress)
    hang = next((e for e in events if e["event"] == "hang"), None)
    again = [e for e in events if e["event"] == "step" and e.get("attempt") == 1]
    done = sorted(
        (e["rank"], e["step"]) for e in events if e["event"] == "done" and e["attempt"] == 1
    )
    ok = rc == 0 and hang is not None and done == [(0, STEPS), (1, STEPS)]
    row: dict[str, Any] = {"ok": ok, "rc": rc, "wall_s": round(time.monotonic() - started, 1)}
    row["killed_ranks"] = sorted({int(r) for a in kills for r in a["outcomes"]})
    if hang is None:
        return row
    onset = float(hang["t"])
    if "killed_at" in seen:
        row["killed_s"] = round(seen["killed_at"] - onset, 2)
    firsts = [min((e["t"] for e in again if e["rank"] == r), default=None) for r in (0, 1)]
    if all(t is not None for t in firsts):
        row["stepping_again_s"] = round(max(firsts) - onset, 2)  # type: ignore[type-var]
    before = [e["step"] for e in events if e["event"] == "step" and e.get("attempt", 0) == 0]
    resumed = [e["resumed_from"] for e in events if e["event"] == "start" and e["attempt"] == 1]
    if before and resumed:
        row["resumed_from"] = min(resumed)
        row["steps_redone"] = max(before) - min(resumed)
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    back = [r["stepping_again_s"] for r in rows if r["ok"] and "stepping_again_s" in r]
    killed = [r["killed_s"] for r in rows if "killed_s" in r]
    lost = [r["steps_redone"] for r in rows if "steps_redone" in r]
    return {
        "trials": len(rows),
        "failed_restarts": sum(not r["ok"] for r in rows),
        "stepping_again_s_median": round(statistics.median(back), 2) if back else None,
        "stepping_again_s_max": max(back) if back else None,
        "killed_s_median": round(statistics.median(killed), 2) if killed else None,
        "steps_redone_median": statistics.median(lost) if lost else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--stacks", default="plain,hf,lightning")
    p.add_argument("--modes", default="stop,sleep")
    p.add_argument("--trials", type=int, default=10, help="per stack and mode")
    p.add_argument("--sleep-trials", type=int, default=0, help="trials of mode sleep (0: --trials)")
    p.add_argument("--patience-s", type=float, default=None, help="not shipped: the sidecar's flag")
    p.add_argument("--json", default="bench/results/restart.json")
    args = p.parse_args()
    began = time.monotonic()
    results: dict[str, Any] = {}
    for mode in args.modes.split(","):
        n = args.sleep_trials or args.trials if mode == "sleep" else args.trials
        for stack in args.stacks.split(","):
            rows = []
            for i in range(n):
                rows.append(trial(stack, mode, args.patience_s))
                print(f"{stack:9} {mode:5} #{i + 1}: {rows[-1]}", flush=True)
            results[f"{stack}/{mode}"] = {"summary": summary(rows), "trials": rows}
            print(f"{stack:9} {mode:5} {results[f'{stack}/{mode}']['summary']}", flush=True)
    patience = SHIPPED_PATIENCE_S if args.patience_s is None else args.patience_s
    data = {
        "shipped_defaults": args.patience_s is None,
        "hang_patience_s": patience,
        "goals_s": {"stop": 12.0, "sleep": patience + 10.0},
        "steps": STEPS,
        "hang_at": HANG_AT,
        "stacks": results,
    }
    write_result(args.json, "restart", data, began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
