"""Where the evicted replica's way back goes: a breakdown of bench_replicated's fault.

``trainprobe run --replicas 2`` of examples/ddp_replicated.py (through
_replica_trace.py, beside this probe) with the sidecar's shipped defaults; rank 1 hangs in
step 15 (``stop``: SIGSTOP, ``sleep``). Seconds from onset to: the hung process
gone (the sidecar's eviction), the launcher's notice and restart, the new
process's interpreter, imports, torchft Manager, the lighthouse's quorum
answer, the transport's configure, the state fetched from the peer, its first
commit and its first step row (bench_replicated's ``evicted_stepping_s``).
Medians over ``--trials``; prints them, writes nothing to bench/results.

    python bench/probes/replicated_breakdown.py --trials 3 --faults stop,sleep
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import _bench  # noqa: F401  (bench/ on the path)
from harness.common import add_repo_to_path

add_repo_to_path()
from tests.support import PYTHON, REPO, SidecarProcess, child_env, read_jsonl, short_tmpdir  # noqa: E402

SCRIPT = REPO / "examples" / "ddp_replicated.py"
TRACE = REPO / "bench" / "probes" / "_replica_trace.py"


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in "ZX"
    except OSError:
        return True


def trial(how: str, steps: int, step_s: float) -> dict[str, float]:
    work = short_tmpdir("tpbp-")
    progress, trace = work / "progress.jsonl", work / "trace.jsonl"
    lines: list[tuple[float, str]] = []
    args = ["--steps", str(steps), "--step-s", str(step_s), "--progress", str(progress)]
    args += ["--hang-rank", "1", "--hang-at", "15", "--hang-how", how]
    with SidecarProcess(work) as sc:
        cmd = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "run", "--replicas", "2"]
        cmd += ["--log-dir", str(work), "--", PYTHON, str(TRACE), str(SCRIPT), *args]
        env = child_env(TRAINPROBE_TARGET=sc.target, TRAINPROBE_TRACE=str(trace))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        assert proc.stdout is not None
        gone: list[float] = []

        def watch() -> None:  # the hung pid, read from the progress file once it hangs
            while proc.poll() is None and not gone:
                rows = read_jsonl(progress) if progress.exists() else []
                hung = next((r["pid"] for r in rows if r["event"] == "hang"), None)
                if hung is not None and _gone(hung):
                    gone.append(time.time())
                time.sleep(0.02)

        threading.Thread(target=watch, daemon=True).start()
        for raw in iter(proc.stdout.readline, b""):
            lines.append((time.time(), raw.decode(errors="replace")))
        proc.wait(600)
    rows = read_jsonl(progress)
    hang = next(r for r in rows if r["event"] == "hang")
    t0 = hang["t"]
    out: dict[str, float] = {"evicted (hung process gone)": gone[0] - t0}
    restarted = next(
        (t, int(m.group(1)))
        for t, line in lines
        if (m := re.search(r"replica1 started \(pids (\d+), restart 1\)", line))
    )
    noticed = next(t for t, line in lines if "replica1 exited" in line)
    out["launcher noticed the exit"] = noticed - t0
    out["launcher restarted the group"] = restarted[0] - t0
    for r in read_jsonl(trace):
        if r["pid"] == restarted[1]:
            out[r["mark"]] = r["t"] - t0
    first = next(
        r for r in rows if r["event"] == "step" and r["rank"] == 1 and r["pid"] != hang["pid"]
    )
    out["first step row"] = first["t"] - t0
    return {k: round(v, 2) for k, v in sorted(out.items(), key=lambda kv: kv[1])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--faults", default="stop,sleep")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--step-s", type=float, default=0.05)
    args = p.parse_args()
    for how in args.faults.split(","):
        trials = []
        for _ in range(args.trials):
            trials.append(trial(how, args.steps, args.step_s))
            print(how, json.dumps(trials[-1]), flush=True)
        keys = sorted(
            {k for t in trials for k in t},
            key=lambda k: statistics.median(t[k] for t in trials if k in t),
        )
        print(f"{how}: median of {len(trials)} (load {os.getloadavg()[0]:.2f})")
        for k in keys:
            print(f"  {statistics.median(t[k] for t in trials if k in t):7.2f} s  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
