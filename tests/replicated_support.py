"""What the tests of ``trainprobe run --replicas N`` share: a launch of the
replicated example (examples/ddp_replicated.py) with its progress file, and the
sidecar's destructive actions."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support import PYTHON, REPO, SidecarProcess, child_env, read_jsonl

__all__ = ["SCRIPT", "Run", "destructive", "example", "launched"]

SCRIPT = REPO / "examples" / "ddp_replicated.py"


class Run:
    """One ``trainprobe run`` of the replicated example, its output and progress."""

    def __init__(
        self,
        work: Path,
        sidecar_target: str,
        *flags: str,
        script: list[str],
        unset: tuple[str, ...],
    ) -> None:
        self.work = work
        self.progress = work / "progress.jsonl"
        self.out = work / "launcher.log"
        cmd = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "run", *flags, "--log-dir", str(work)]
        env = child_env(TRAINPROBE_TARGET=sidecar_target, TRAINPROBE_STATE_DIR=str(work / "state"))
        for name in unset:  # as a user's shell has it, without the tests' defaults
            env.pop(name, None)
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [*cmd, "--", *script],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def rows(self, event: str, rank: int | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in read_jsonl(self.progress)
            if r.get("event") == event and (rank is None or r.get("rank") == rank)
        ]

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for r in read_jsonl(self.progress):  # leave nothing behind, even a stopped rank
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(r["pid"]), signal.SIGCONT)
                os.kill(int(r["pid"]), signal.SIGKILL)


def example(progress: Path, steps: int, *fault: str) -> list[str]:
    return [PYTHON, str(SCRIPT), "--steps", str(steps), "--progress", str(progress), *fault]


@contextlib.contextmanager
def launched(
    work: Path, target: str, *flags: str, script: list[str], unset: tuple[str, ...] = ()
) -> Iterator[Run]:
    """``trainprobe run FLAGS -- SCRIPT``; ``unset``: variables its environment lacks."""
    run = Run(work, target, *flags, script=script, unset=unset)
    try:
        yield run
    except BaseException:
        print(run.text()[-6000:])
        raise
    finally:
        run.close()


def destructive(sidecar: SidecarProcess) -> list[dict[str, Any]]:
    return [a for a in sidecar.incidents("action") if a.get("action") in ("evict", "kill")]
