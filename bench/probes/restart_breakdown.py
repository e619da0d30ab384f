"""Where the time goes between trainprobe's kill and the restarted attempt's first step.

    python bench/probes/restart_breakdown.py [--stacks plain,hf,lightning] [--trials 3]
                                             [--json FILE] [-- TORCHRUN FLAGS...]

bench_restart.py's SIGSTOP trial (tests/restart_stacks.py: 2 gloo ranks under
``torchrun --standalone --max-restarts 1``, rank 1 stops itself at step 13, a
real sidecar on its shipped defaults), with every rank run through
``_restart_timing.py``, which timestamps its start-up from inside. Each
milestone is seconds after the onset, for the latest rank:

- ``survivor_error``: the surviving rank's collective raised (the kill);
- ``agent_saw_failure``: torchrun's agent logged the failed rank (it looks
  every ``--monitor-interval``);
- ``agent_started``: the agent, its rendezvous done, starts the ranks again;
- ``exec``, ``torch_imported``, ``trainprobe_imported``, ``pg_enter``,
  ``pg_exit``: the new processes' start-up;
- ``start``: the stack's own start event (after its checkpoint, except for
  HF, which loads it in ``train()``); ``stepping_again``: every rank's first
  step, as bench_restart.py measures it.

Flags after ``--`` go to torchrun (e.g. ``-- --monitor-interval 5``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _bench  # noqa: F401  (bench/ on the path)
from harness.common import add_repo_to_path

add_repo_to_path()

from tests.restart_stacks import HANG_AT, stack_args  # noqa: E402
from tests.support import PYTHON, child_env, read_jsonl, short_tmpdir, sidecar  # noqa: E402

WRAPPER = Path(__file__).resolve().parent / "_restart_timing.py"
AGENT_LINES = {
    "agent_saw_failure": "failed (exitcode",
    "agent_started": "Starting worker group",
}


def _run(cmd: list[str], env: dict[str, str], timeout_s: float) -> tuple[int | None, list]:
    """torchrun, its output lines stamped as they come."""
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc: int | None = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = None
    reader.join(5)
    return rc, lines


def trial(stack: str, torchrun_flags: list[str]) -> dict[str, Any]:
    work = short_tmpdir("tprb-")
    progress, timing = work / "progress.jsonl", work / "timing.jsonl"
    script, *own = stack_args(stack, work, progress)
    args = [str(WRAPPER), script, *own, "--hang-rank", "1", "--hang-at", str(HANG_AT)]
    args += ["--hang-how", "stop"]
    with sidecar() as sc:
        cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        cmd += ["--max-restarts", "1", *torchrun_flags, *args]
        env = child_env(
            TRAINPROBE_TARGET=sc.target,
            TOKENIZERS_PARALLELISM="false",
            TP_TIMING=str(timing),
            LOGLEVEL="INFO",
        )
        rc, lines = _run(cmd, env, timeout_s=400)
    events = read_jsonl(progress)
    stamps = read_jsonl(timing) if timing.exists() else []
    hang = next((e for e in events if e["event"] == "hang"), None)
    row: dict[str, Any] = {"stack": stack, "rc": rc, "load": round(os.getloadavg()[0], 1)}
    if hang is None:
        return row
    onset = float(hang["t"])

    def latest(name: str, attempt: int = 1, key: str = "t") -> float | None:
        ts = [e[key] for e in stamps if e["attempt"] == attempt and e["ev"] == name]
        return round(max(ts) - onset, 2) if ts else None

    errors = [e["t"] for e in stamps if e["attempt"] == 0 and e["ev"] == "uncaught"]
    row["survivor_error"] = round(min(errors) - onset, 2) if errors else None
    for name, text in AGENT_LINES.items():
        seen = [t for t, line in lines if t > onset and text in line]
        row[name] = round(seen[0] - onset, 2) if seen else None
    row["exec"] = latest("exec")
    row["torch_imported"] = latest("torch_imported")
    first_imports = {}
    for e in stamps:
        if e["attempt"] == 1 and e["ev"] == "tp_import":
            first_imports.setdefault(e["rank"], e)
    if first_imports:
        row["trainprobe_imported"] = round(max(e["t"] for e in first_imports.values()) - onset, 2)
        row["trainprobe_import_s"] = round(max(e["t"] - e["t0"] for e in first_imports.values()), 3)
    row["pg_enter"] = latest("pg_enter")
    row["pg_exit"] = latest("pg_exit")
    starts = [e["t"] for e in events if e["event"] == "start" and e.get("attempt") == 1]
    row["start"] = round(max(starts) - onset, 2) if starts else None
    steps = [e for e in events if e["event"] == "step" and e.get("attempt") == 1]
    firsts = [min((e["t"] for e in steps if e["rank"] == r), default=None) for r in (0, 1)]
    if all(t is not None for t in firsts):
        row["stepping_again"] = round(max(firsts) - onset, 2)  # type: ignore[type-var]
    return row


def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in rows[0] if k not in ("stack", "rc")]
    out: dict[str, Any] = {"trials": len(rows), "failed": sum(r["rc"] != 0 for r in rows)}
    for k in keys:
        xs = [r[k] for r in rows if r.get(k) is not None]
        out[k] = round(statistics.median(xs), 3) if xs else None
    return out


def main() -> int:
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--stacks", default="plain,hf,lightning")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--json", default="", help="also write every row and the medians here")
    args = p.parse_args(argv)
    result: dict[str, Any] = {"torchrun_flags": flags, "stacks": {}}
    for stack in args.stacks.split(","):
        rows = []
        for _ in range(args.trials):
            rows.append(trial(stack, flags))
            print(json.dumps(rows[-1]), flush=True)
        result["stacks"][stack] = {"median": medians(rows), "trials": rows}
        print(f"{stack} median: {json.dumps(result['stacks'][stack]['median'])}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
