"""Replicated jobs (torchft): how soon the survivors commit again, with trainprobe and without.

Each trial runs two replica groups of one process each
(``examples/torchft_train.py``: real torchft Manager, ProcessGroupGloo, a
real ``torchft_lighthouse``), injects a fault into replica ``train_1`` at a
committed step, and measures from outside, on this machine's wall clock:

- **survivor**: onset (the faulty replica logs it right before the fault) to
  the first step the survivor ``train_0`` commits after it, and whether the
  survivor kept its pid;
- **culprit gone**: onset to the faulty process being gone (evicted, or dead);
- **replacement**: onset to the first step a replacement of ``train_1``
  commits (started here as soon as the culprit is gone, as its torchrun
  would restart it).

Side by side, in one run: ``trainprobe`` (the sidecar CLI with its shipped
defaults) and ``alone`` (no sidecar: torchft by itself; the hooks find no
sidecar and only retry in the background). A survivor that has not
committed within ``--limit-s`` is reported as such.

    python bench/bench_torchft.py --faults sleep,stop,kill9 --trials 1

Results: bench/results/torchft.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import (  # noqa: E402
    PYTHON,
    SidecarProcess,
    child_env,
    free_port,
    read_jsonl,
    short_tmpdir,
)

SCRIPT = REPO / "examples" / "torchft_train.py"
LIGHTHOUSE = Path(PYTHON).with_name("torchft_lighthouse")


def rows(progress: Path, event: str, replica: str) -> list[dict[str, Any]]:
    return [
        r for r in read_jsonl(progress) if r.get("event") == event and r.get("replica") == replica
    ]


def trial(fault: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    work = short_tmpdir("tpftb-")
    progress, marker = work / "progress.jsonl", work / "fault.done"
    port = free_port()
    lighthouse = subprocess.Popen(
        [
            str(LIGHTHOUSE),
            *("--bind", f"[::]:{port}", "--min_replicas", "1"),
            *("--join_timeout_ms", str(args.join_timeout_ms)),
            *("--heartbeat_timeout_ms", str(args.heartbeat_timeout_ms)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sidecar = SidecarProcess(work).start() if mode == "trainprobe" else None
    target = sidecar.target if sidecar else f"unix://{work}/none.sock"
    procs: list[subprocess.Popen[bytes]] = []

    def start(replica: str, f: str = "none") -> subprocess.Popen[bytes]:
        env = child_env(
            RANK="0",
            WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}",
            TRAINPROBE_TARGET=target,
            TRAINPROBE_JOB_ID="bench-ft",
        )
        cmd = [PYTHON, str(SCRIPT), "--own-store", "--replica-id", replica, "--replicas", "2"]
        cmd += ["--steps", "100000", "--progress", str(progress), "--fault", f]
        cmd += ["--fault-at", str(args.fault_at), "--fault-marker", str(marker)]
        p = subprocess.Popen(
            cmd,
            stdout=open(work / f"{replica}-{len(procs)}.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            env=env,
        )
        procs.append(p)
        return p

    out: dict[str, Any] = {"fault": fault, "mode": mode}
    try:
        survivor = start("train_0")
        culprit = start("train_1", fault)
        deadline = time.monotonic() + 180
        while not rows(progress, "fault", "train_1") and time.monotonic() < deadline:
            time.sleep(0.05)
        faults = rows(progress, "fault", "train_1")
        if not faults:
            out["error"] = "no fault"
            return out
        onset = float(faults[0]["t"])
        end = time.time() + args.limit_s
        gone_at = resumed_at = replaced_at = None
        replacement = None
        while time.time() < end and (resumed_at is None or replaced_at is None):
            now = time.time()
            if gone_at is None and culprit.poll() is not None:
                gone_at = now
                replacement = start("train_1")
            if resumed_at is None:
                steps = [r for r in rows(progress, "step", "train_0") if r["t"] > onset + 0.2]
                if steps:
                    resumed_at = steps[0]["t"]
            if replacement is not None and replaced_at is None:
                steps = [
                    r for r in rows(progress, "step", "train_1") if r["pid"] == replacement.pid
                ]
                if steps:
                    replaced_at = steps[0]["t"]
            if resumed_at is not None and gone_at is None and mode == "alone":
                break  # torchft alone never ends a hung replica: nothing more to wait for
            time.sleep(0.05)
        out.update(
            survivor_resumed_s=round(resumed_at - onset, 2) if resumed_at else None,
            survivor_same_pid=survivor.poll() is None,
            culprit_gone_s=round(gone_at - onset, 2) if gone_at else None,
            replacement_stepping_s=round(replaced_at - onset, 2) if replaced_at else None,
        )
        if sidecar is not None:
            acts = sidecar.incidents("action")
            out["actions"] = [a.get("action") for a in acts]
            out["summaries"] = [a.get("summary") for a in acts if a.get("summary")]
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        if sidecar is not None:
            sidecar.stop()
        lighthouse.kill()
        lighthouse.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--faults", default="sleep,stop,kill9")
    p.add_argument("--modes", default="trainprobe,alone")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--fault-at", type=int, default=15)
    p.add_argument("--limit-s", type=float, default=90.0)
    p.add_argument("--heartbeat-timeout-ms", type=int, default=1000)
    p.add_argument("--join-timeout-ms", type=int, default=10000)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "torchft.json")
    args = p.parse_args()
    results = []
    for fault in args.faults.split(","):
        for mode in args.modes.split(","):
            for _ in range(args.trials):
                r = trial(fault, mode, args)
                print(json.dumps(r), flush=True)
                results.append(r)
    summary: dict[str, Any] = {}
    for fault in args.faults.split(","):
        for mode in args.modes.split(","):
            xs = [
                r["survivor_resumed_s"]
                for r in results
                if r["fault"] == fault and r["mode"] == mode and r.get("survivor_resumed_s")
            ]
            summary[f"{fault}/{mode}"] = statistics.median(xs) if xs else None
    doc = {
        "command": " ".join(sys.argv),
        "load": os.getloadavg(),
        "cpus": os.cpu_count(),
        "settings": vars(args) | {"out": str(args.out)},
        "median_survivor_resumed_s": summary,
        "trials": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
