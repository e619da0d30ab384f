"""A pause is judged on every local rank of a job, not only on the 8 a round samples.

Real parts: one sidecar, ten real hooked ranks of one job on its Unix socket,
each verified by an identity ticket (tests/workers/gil_hang.py: they step,
then hang silently in a C call holding the GIL when told), real SIGSTOP and
SIGCONT. An evidence round samples at most 8 ranks (``MAX_INSPECTED``); the
engine reads the kernel state of the job's other live local ranks too (one
``/proc`` read each, no stacks).

- The whole job stopped is a pause: ranks 8 and 9, past the sample, are read
  held too, so nothing is killed, and the job trains on after ``SIGCONT``.
- Ranks 0-7 stopped while ranks 8 and 9 hang silently at the same moment is
  no pause: the stopped ranks are killed at once, ranks 8 and 9 when their
  patience (4 s) is spent. Before, ranks 8 and 9 counted by their reports
  alone (silent: neither way), the job was "paused", and nothing was killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import PYTHON, SidecarProcess, child_env, short_tmpdir, wait_for

pytestmark = pytest.mark.slow

WORKERS = Path(__file__).parent / "workers"
FLAGS = ("--stall-timeout-s", "2", "--heartbeat-timeout-s", "2", "--hang-patience-s", "4")
FLAGS += ("--kill-grace-s", "0.5", "--job-kill-grace-s", "60", "--tick-interval-ms", "50")
WORLD = 10


@contextlib.contextmanager
def _ranks(job: str, target: str, trigger: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Ranks 0-9 of ``job``; ranks 8 and 9 hang once ``trigger`` exists."""
    hang_on = [trigger if r >= 8 else trigger.with_name("never") for r in range(WORLD)]
    procs = [
        subprocess.Popen(
            [PYTHON, str(WORKERS / "gil_hang.py"), job, str(r), str(WORLD), str(hang_on[r])],
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(TRAINPROBE_TARGET=target),
        )
        for r in range(WORLD)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def _decisions(sc: SidecarProcess, job: str, rule: str) -> list[dict]:
    return [d for d in sc.incidents("decision") if d.get("job_id") == job and d["rule"] == rule]


def _stepping_past(sc: SidecarProcess, job: str, step: int) -> bool:
    rows = list(sc.status(job).workers)
    return len({r.rank for r in rows if r.step > step and r.verified}) == WORLD


def _signal(procs: list[subprocess.Popen[str]], sig: int) -> None:
    for p in procs:
        os.kill(p.pid, sig)


def test_a_pause_is_judged_on_every_local_rank_not_only_the_sampled_eight() -> None:
    wd = short_tmpdir("ppast-")
    job = "past-the-eight"
    trigger = wd / "hang-now"
    with SidecarProcess(short_tmpdir("ppsc-"), *FLAGS) as sc, _ranks(job, sc.target, trigger) as ps:
        wait_for(lambda: _stepping_past(sc, job, 5), 90, what="ten ranks stepping")
        # The whole job stopped: ranks 8 and 9 are read held too, so a pause.
        _signal(ps, signal.SIGSTOP)
        try:
            (paused,) = wait_for(lambda: _decisions(sc, job, "paused"), 30, what="a pause")
            assert "ranks [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in paused["why"], paused["why"]
            time.sleep(3.0)  # patience 4 s from the silence: a kill would come now
        finally:
            _signal(ps, signal.SIGCONT)
        assert all(p.poll() is None for p in ps), "a rank of the paused job was killed"
        wait_for(lambda: _decisions(sc, job, "resumed"), 30, what="the resume")
        step = max(r.step for r in sc.status(job).workers)
        wait_for(lambda: _stepping_past(sc, job, step + 5), 60, what="stepping again")
        # Ranks 0-7 stopped, ranks 8 and 9 hung silently, at the same moment.
        _signal(ps[:8], signal.SIGSTOP)
        trigger.touch()
        onset = time.monotonic()
        for p in ps[8:]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, onset + 40 - time.monotonic()))
        took = time.monotonic() - onset
        assert all(p.poll() is not None for p in ps[8:]), (
            f"ranks 8 and 9 alive {took:.0f}s after they hung: "
            f"{[(d['rule'], d['why'][:200]) for d in sc.incidents('decision')]}"
        )
        assert len(_decisions(sc, job, "paused")) == 1, "the hang was taken for a pause"
        wait_for(lambda: all(p.poll() is not None for p in ps[:8]), 30, what="ranks 0-7 killed")
        print(f"ranks 8 and 9 killed {took:.1f}s after they hung")
