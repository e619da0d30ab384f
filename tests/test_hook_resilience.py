"""The hook never blocks or raises into training, whatever the sidecar does."""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import PYTHON, REPO, SidecarProcess, child_env, short_tmpdir, wait_for

LOOP = REPO / "tests" / "workers" / "loop.py"


def start_loop(
    workdir: Path, target: str, steps: int, step_s: float, *extra: str, env: dict | None = None
):
    progress = workdir / "progress.txt"
    log = open(workdir / "loop.log", "wb")  # noqa: SIM115 - closed by the caller via proc.wait
    proc = subprocess.Popen(
        [PYTHON, str(LOOP), str(steps), str(step_s), str(progress), *extra],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=child_env(TRAINPROBE_TARGET=target, **(env or {})),
    )
    return proc, progress, workdir / "loop.log"


def steps_and_gaps(progress: Path) -> tuple[int, float, float]:
    lines = progress.read_text().split("\n")
    times = [float(x.split()[2]) for x in lines if x.startswith("step ")]
    in_hook = float(next(x for x in lines if x.startswith("done")).split()[1])
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return len(times), max(gaps), in_hook


def test_training_runs_untouched_without_a_sidecar() -> None:
    workdir = short_tmpdir()
    proc, progress, log = start_loop(workdir, f"unix://{workdir}/nobody.sock", 300, 0.005)
    assert proc.wait(60) == 0
    n, max_gap, in_hook = steps_and_gaps(progress)
    assert n == 300
    assert max_gap < 1.5  # no step waited out a connect or write timeout (>= 5 s)
    assert in_hook / n < 50e-6  # on_step_end stayed trivially cheap
    text = log.read_text()
    assert text.count("not reachable") == 1, text  # warned once, not per retry


@pytest.mark.parametrize("bad", ["nonsense", "http://127.0.0.1:1", "unix://rel.sock", "h:99999"])
def test_a_bad_target_leaves_training_running_with_one_warning(bad: str) -> None:
    workdir = short_tmpdir()
    proc, progress, log = start_loop(workdir, bad, 100, 0.002)
    assert proc.wait(60) == 0, log.read_text()
    n, _, _ = steps_and_gaps(progress)
    assert n == 100
    text = log.read_text()
    assert text.count("bad sidecar address") == 1, text
    assert "Traceback" not in text, text


@pytest.mark.slow
def test_sidecar_killed_and_restarted_mid_run_hook_reconnects() -> None:
    workdir = short_tmpdir()
    sc = SidecarProcess(workdir, "--stall-timeout-s", "30").start()
    proc, progress, log = start_loop(workdir, sc.target, 600, 0.02)
    try:
        wait_for(lambda: sc.status().workers, 30, what="first report")
        first_pid = sc.proc.pid
        sc.stop(signal.SIGKILL)
        time.sleep(2.0)
        sc.start()  # same socket path: the stale socket file is replaced
        assert sc.proc.pid != first_pid
        row = wait_for(lambda: sc.status().workers, 15, what="reconnect")[0]
        assert row.job_id == "loop" and row.state == "connected"
        step_then = row.step
        wait_for(lambda: sc.status().workers[0].step > step_then, 10, what="steps after reconnect")
        assert proc.wait(60) == 0
        n, max_gap, _ = steps_and_gaps(progress)
        assert n == 600 and max_gap < 1.5  # a blocked step would wait >= 5 s
        lines = progress.read_text().splitlines()
        assert lines[-2].endswith(" 1")  # connected again at the end
        text = log.read_text()
        assert text.count("not reachable") == 1 and "connected to sidecar" in text
    finally:
        proc.kill()
        sc.stop()


def test_forked_dataloader_workers_do_not_inherit_the_channel() -> None:
    workdir = short_tmpdir()
    with SidecarProcess(workdir) as sc:
        proc, progress, log = start_loop(
            workdir, sc.target, 40, 0.02, "--dataloader", "--forks", "40"
        )
        assert proc.wait(90) == 0, log.read_text()
        n, _, _ = steps_and_gaps(progress)
        assert n == 40
        assert "rejected" not in sc.log_text()  # no child ever spoke for the parent's rank
        assert sc.log_text().count("worker loop/rank0 connected") == 1
        assert "stream ended: goodbye" in sc.log_text()
