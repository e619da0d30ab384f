"""trainprobe demo: a rank hangs, the survivors go on in seconds, the evicted replica rejoins.

    python examples/replicated_demo.py [--hang-at 30] [--hang-how sleep|stop] [--steps 600]

Runs ``trainprobe run --replicas 2 -- python examples/ddp_replicated.py``
(examples/ddp_train.py's DDP loop, replicated by three changed lines) on CPU
over gloo: the launcher starts a torchft lighthouse, a sidecar and two replica
groups of one rank each. Rank 1 hangs inside a step (``--hang-how sleep``: an
ambiguous fault, evicted after the replicated patience of 10 s; ``stop``:
SIGSTOP, definitive, evicted at once). The sidecar names it and evicts its
replica group; the other replica commits its next step in the same process,
without a restart; the launcher restarts the evicted group, which fetches the
parameters and optimizer state from the live replica (no checkpoint) and trains
on at the survivor's step. Prints each moment, timed from the hang's onset,
and checks at the end that both replicas hold the same parameters. About a
minute, nothing to set up. The launcher's full output: run.log in the printed
directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainprobe.sidecar.cli.incidents.story import culprit_line
from trainprobe.sidecar.core.text import printable

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    # Long enough that the evicted group, started again, finds the survivor still
    # training on a loaded machine (it took 23 s after the kill at load 8).
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--hang-at", type=int, default=30)
    p.add_argument("--hang-how", choices=("sleep", "stop"), default="sleep")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trainprobe-demo-", dir="/tmp"))
    progress, incidents = work / "progress.jsonl", work / "state" / "incidents.jsonl"
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        TRAINPROBE_TARGET=f"unix://{work / 'sidecar.sock'}",  # the launcher starts one there
        TRAINPROBE_STATE_DIR=str(work / "state"),
        TRAINPROBE_JOB_ID="demo",
    )
    train = [sys.executable, str(HERE / "ddp_replicated.py"), "--steps", str(args.steps)]
    train += ["--hang-rank", "1", "--hang-at", str(args.hang_at), "--hang-how", args.hang_how]
    train += ["--progress", str(progress)]
    cmd = [sys.executable, "-m", "trainprobe.sidecar.cli.ctl", "run", "--replicas", "2"]
    cmd += ["--log-dir", str(work), "--", *train]
    print(f"== trainprobe demo: replicated recovery (files in {work})")
    print("== $ trainprobe run --replicas 2 -- python examples/ddp_replicated.py "
          f"--hang-rank 1 --hang-at {args.hang_at} --hang-how {args.hang_how}")  # fmt: skip
    with open(work / "run.log", "wb") as log:
        launcher = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    story = Story(progress, incidents)
    try:
        deadline = time.monotonic() + 300
        while launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            story.advance()
        story.advance()
    except KeyboardInterrupt:
        pass
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            launcher.wait(60)
    return story.end(launcher.returncode, work)


class Story:
    """What happened so far, from the ranks' progress and the sidecar's incident log."""

    def __init__(self, progress: Path, incidents: Path) -> None:
        self.progress, self.incidents = progress, incidents
        self.told: set[str] = set()
        self.onset: dict[str, Any] | None = None
        self.pids: dict[int, int] = {}

    def say(self, key: str, text: str) -> None:
        if key not in self.told:
            self.told.add(key)
            print(text, flush=True)

    def at(self, t: float) -> str:
        return f"+{t - self.onset['t']:5.1f} s" if self.onset else "       "

    def advance(self) -> None:
        rows = _lines(self.progress)
        steps = [r for r in rows if r.get("event") == "step"]
        for r in steps:
            self.pids.setdefault(r["rank"], r["pid"])
        if len(self.pids) == 2:
            pids = ", ".join(f"replica {k}: pid {v}" for k, v in sorted(self.pids.items()))
            self.say("start", f"== 2 replica groups train in step ({pids})")
        hang = next((r for r in rows if r.get("event") == "hang"), None)
        if hang is None:
            return
        self.onset = hang
        self.say(
            "hang",
            f"\n!! {self.at(hang['t'])}  rank 1 (replica 1, pid {hang['pid']}) hangs in step "
            f"{hang['step']} ({hang['how']}); replica 0 waits for it in the gradient allreduce",
        )
        records = _lines(self.incidents)
        inc = next((r for r in records if r.get("type") == "incident"), None)
        if inc is not None:
            onset = inc["time"] - inc["detection_latency_s"]
            self.say(
                "incident",
                f"!! {self.at(inc['time'])}  the sidecar names the culprit: "
                f"{printable(culprit_line(inc) or str(inc.get('culprits')))}",
            )
            dec = next((r for r in records if r.get("type") == "decision" and r.get("act")), None)
            act = next((r for r in records if r.get("type") == "action"), None)
            if dec is not None and act is not None:
                self.say(
                    "evict",
                    f"-> {self.at(onset + dec['decided_after_s'])}  {act.get('summary')} "
                    f"({printable(str(dec.get('why', '')).split(';')[0])})",
                )
        after = [r for r in steps if r["t"] > hang["t"]]
        survivor = next((r for r in after if r["rank"] == 0 and r["step"] > hang["step"]), None)
        if survivor is not None:
            same = "same pid" if survivor["pid"] == self.pids.get(0) else "a NEW pid"
            self.say(
                "survivor",
                f"-> {self.at(survivor['t'])}  replica 0 committed step {hang['step']} and goes "
                f"on ({same} {survivor['pid']}, never restarted)",
            )
        back = [r for r in after if r["rank"] == 1 and r["pid"] != hang["pid"]]
        # Its first step heals, numbered as the survivor's: a replica that came
        # back after the survivor had finished healed from nobody (its first
        # step is 1), and the story says so by never telling this line.
        if back and back[0]["step"] > hang["step"]:
            self.say(
                "rejoin",
                f"-> {self.at(back[0]['t'])}  replica 1, restarted by the launcher (pid "
                f"{back[0]['pid']}), fetched parameters and optimizer state from replica 0 "
                f"and trains on with it at step {back[0]['step']}",
            )

    def end(self, code: int | None, work: Path) -> int:
        done = {r["rank"]: r for r in _lines(self.progress) if r.get("event") == "done"}
        print(f"\n== the job ended with status {code}")
        equal = False
        if len(done) == 2:
            diff = max(
                abs(a - b) for a, b in zip(done[0]["params"], done[1]["params"], strict=True)
            )
            equal = diff <= 1e-6
            same = "equal" if equal else f"DIFFERENT (max difference {diff:.2g})"
            print(f"== both replicas end at the same step with {same} parameters")
        ok = {"hang", "evict", "survivor", "rejoin"} <= self.told and code == 0 and equal
        if not ok:
            print(f"!! the story is incomplete: see {work}/run.log", file=sys.stderr)
            return 1
        print("   without replicas, the same hang costs every rank the 90 s patience, a")
        print("   restart and the work since the last checkpoint (make demo-restart)")
        return 0


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
    return out


if __name__ == "__main__":
    sys.exit(main())
