"""What the Lightning and Hugging Face callback tests share: a two-rank job in its
own session, the check that a hung rank was named and killed alone, and the
phases the ranks declared while a healthy job ran."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support import SidecarProcess, child_env, wait_for

__all__ = ["hung_rank_killed_alone", "phases_until_exit", "session_job"]


@contextlib.contextmanager
def session_job(
    cmd: list[str], workdir: Path, target: str, job_id: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` in its own session (the framework or torchrun starts the other
    ranks as its children, and cleanup must reach them all), logged to
    ``workdir/job.log``; SIGKILLed as a group on the way out."""
    env = child_env(TRAINPROBE_TARGET=target, TRAINPROBE_JOB_ID=job_id)
    with open(workdir / "job.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def hung_rank_killed_alone(
    sc: SidecarProcess, job_id: str, script: str, timeout_s: float
) -> dict[str, Any]:
    """Rank 1 of ``job_id`` hung in ``script``'s training_step while rank 0
    waited in the allreduce: the sidecar named it a straggler by the
    allreduce's sequence numbers and killed it alone. Returns rank 1's outcome."""
    inc = sc.wait_incident(lambda r: r["job_id"] == job_id, timeout_s=timeout_s)
    d = inc["diagnosis"]
    assert d["kind"] == "straggler" and d["culprits"] == [1] and d["waiting"] == [0], d
    assert "rank 1 on " in d["text"] and "never entered allreduce #" in d["text"]
    where = d["stacks"]["1"]["where"]
    assert script in where and "training_step" in where, where
    assert inc["targets"] == [1] and inc["action"] == "kill"
    action = wait_for(
        lambda: [r for r in sc.incidents("action") if r["incident_id"] == inc["id"]], 30
    )[0]
    assert list(action["outcomes"]) == ["1"]
    outcome: dict[str, Any] = action["outcomes"]["1"]
    return outcome


def phases_until_exit(
    sc: SidecarProcess, job_id: str, proc: subprocess.Popen[bytes], timeout_s: float
) -> set[str]:
    """Every phase the sidecar saw a rank of ``job_id`` declare until ``proc`` exits."""
    phases: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            phases |= {n for w in sc.status(job_id).workers for n in w.phase.split(",") if n}
        time.sleep(0.2)
    return phases
