"""Start-up hangs: how soon a rank stuck before init_process_group is named,
and whether torchrun's restarts get through a plain init_process_group.

    python bench/probes/bench_startup.py [--trials 3] [--restart-runs 5] [--out bench/results]

1. ``--trials`` times: real torchrun, 3 gloo ranks of tests/workers/restart_init.py,
   rank 1 sleeping before init_process_group on attempt 0, a real sidecar
   (shipped defaults but a 15 s hang patience). Measures the incident's time
   after the last peer entered init_process_group (wall clocks of one host).
2. ``--restart-runs`` runs each, with and without the hook: torchrun
   ``--max-restarts 3``, rank 1 failing after its first step on attempts 0..2;
   counts the restarts whose init_process_group completed on both ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support import PYTHON, child_env, read_jsonl, sidecar  # noqa: E402

WORKER = REPO / "tests" / "workers" / "restart_init.py"


def _cmd(progress: Path, nproc: int, restarts: int, *args: str) -> list[str]:
    return [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        str(restarts),
        str(WORKER),
        str(progress),
        *args,
    ]


def naming_trial() -> float:
    with tempfile.TemporaryDirectory(prefix="tp-") as d:
        progress = Path(d) / "p.jsonl"
        with sidecar("--hang-patience-s", "15") as sc:
            subprocess.run(
                _cmd(progress, 3, 1, "0", "--init-sleep", "1:600"),
                env=child_env(TRAINPROBE_TARGET=sc.target, PG_TIMEOUT_S="300"),
                capture_output=True,
                timeout=300,
            )
            inc = sc.wait_incident(lambda r: r["rule"] == "init_straggler", timeout_s=10)
        first = [e for e in read_jsonl(progress) if e["attempt"] == 0]
        peers_in = max(e["t"] for e in first if e["event"] == "init_enter")
        return float(inc["time"]) - peers_in


def restart_run(hook: bool) -> tuple[int, int]:
    """(restarts whose init completed, restarts started) in one run."""
    with tempfile.TemporaryDirectory(prefix="tp-") as d:
        progress = Path(d) / "p.jsonl"
        args = ["3"] + ([] if hook else ["--no-hook"])
        env = child_env(TRAINPROBE_TARGET=f"unix://{d}/none.sock", PG_TIMEOUT_S="20")
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(_cmd(progress, 2, 3, *args), env=env, capture_output=True, timeout=240)
        events = read_jsonl(progress) if progress.exists() else []
    ok = started = 0
    for attempt in (1, 2, 3):
        mine = [e for e in events if e["attempt"] == attempt]
        if mine:
            started += 1
            ok += sum(e["event"] == "init_done" for e in mine) == 2
    return ok, started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--restart-runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    named = [naming_trial() for _ in range(args.trials)]
    with ThreadPoolExecutor(args.restart_runs) as pool:
        runs = {
            mode: list(pool.map(restart_run, [mode == "hook"] * args.restart_runs))
            for mode in ("no_hook", "hook")
        }
    result = {
        "command": " ".join(["python", "bench/probes/bench_startup.py", *sys.argv[1:]]),
        "load_average_at_start": round(load, 1),
        "named_after_peers_s": [round(x, 2) for x in named],
        "named_after_peers_median_s": round(statistics.median(named), 2),
        "restarts": {
            mode: {"init_completed": sum(r[0] for r in rs), "started": sum(r[1] for r in rs)}
            for mode, rs in runs.items()
        },
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "startup.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
