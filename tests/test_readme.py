"""The README is a front door a new user walks through: short, and every
command it shows works.

The commands of "Watch and look back" run here, literally, against a sidecar
started as the README starts it (no flags: the per-user socket) with a hooked
worker. Every other command it shows (make, pip, the launchers) takes minutes
and is run by the test named for it in ``RUN_BY``; this test checks that each
command is run here or named there, and that the named test exists, so a
command added to the README without a test fails here.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import PYTHON, REPO, child_env, short_tmpdir, wait_for

README = REPO / "README.md"
WORKER = REPO / "tests" / "workers" / "hang_after.py"
BIN = Path(PYTHON).parent

INSTALL = "tests/test_install.py::test_sidecar_only_install_judges_a_worker_without_torch_or_ray"
#: A command the README shows -> the test that runs it.
RUN_BY = {
    "make demo": "tests/test_examples.py::test_make_demo_tells_the_replicated_story",
    # .ci/run is `make test`: CI runs it on every submission.
    "make test": ".ci/run",
    "pip install .": INSTALL,
    "pip wheel --no-deps -w dist .": INSTALL,
    "pip install dist/trainprobe-0.1.0-py3-none-any.whl": INSTALL,
    "torchrun --max-restarts 3 train.py": (
        "tests/test_framework_restart.py"
        "::test_a_killed_hung_rank_comes_back_under_torchrun_max_restarts"
    ),
    "trainprobe run --replicas 2 -- python train.py": (
        "tests/test_replicated_run.py"
        "::test_a_hung_replica_is_evicted_the_survivor_goes_on_and_the_group_rejoins"
    ),
    "trainprobe-sidecar --ray-per-node --ray-address auto": "tests/test_ray_standalone.py",
}
#: Run here, in ``test_the_watch_commands_work_as_shown``.
RUN_HERE = (
    "trainprobe-sidecar",
    "trainprobe status",
    "trainprobe diagnose",
    "trainprobe top",
    "trainprobe incidents",
    "trainprobe report --job JOB",
)


def shell_commands(text: str) -> list[str]:
    """Each command line of the README's ``sh`` blocks, its comment cut."""
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            cmd = line.split(" #", 1)[0].strip()
            if cmd and not cmd.startswith("#"):
                out.append(cmd)
    return out


def table_commands(text: str) -> list[str]:
    """Commands in the README's tables (in backticks, starting with a launcher)."""
    starts = ("torchrun ", "trainprobe ", "trainprobe-sidecar ", "make ", "pip ")
    return [
        c
        for row in text.splitlines()
        if row.startswith("|")
        for c in re.findall(r"`([^`]+)`", row)
        if c.startswith(starts)
    ]


def test_the_readme_is_a_front_door() -> None:
    assert README.read_text().count("\n") <= 200


def test_every_command_shown_is_run_by_a_test() -> None:
    text = README.read_text()
    shown = shell_commands(text) + table_commands(text)
    assert "make demo" in shown and "trainprobe status" in shown  # the reader reads
    missing = [c for c in shown if c not in RUN_BY and c not in RUN_HERE]
    assert not missing, f"README commands no test runs (add one to RUN_BY): {missing}"
    for cmd in shown:
        where = RUN_BY.get(cmd)
        if where is None or where == ".ci/run":
            continue
        path, _, name = where.partition("::")
        assert (REPO / path).exists(), where
        if name:
            tree = ast.parse((REPO / path).read_text())
            names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert name in names, f"{cmd!r}: {where} does not exist"
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_the_watch_commands_work_as_shown() -> None:
    """ "Watch and look back", run literally: a sidecar with no flags, a hooked
    worker that hangs, then each command; ``JOB`` is the job's name as status
    shows it (the README says --job takes it)."""
    text = README.read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "trainprobe status" in b)
    cmds = [line.split(" #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert tuple(cmds) == RUN_HERE
    home = short_tmpdir("tp-readme-")
    # The per-user socket lives under $TMPDIR: a private one for this test.
    env = child_env(TMPDIR=str(home), PATH=f"{BIN}:{os.environ['PATH']}")
    env.pop("TRAINPROBE_TARGET", None)
    state = home / "state"
    env["TRAINPROBE_STATE_DIR"] = str(state)
    # The verdict comes at the 3 s stall floor; a patience under it killed at
    # the verdict, so HUNG showed for under a second, less than one `status`
    # call takes at load 20 (the test missed it). 10 s: the hang is seen, as
    # a user would, for about 7 s, and diagnose and top run inside it.
    env["TRAINPROBE_HANG_PATIENCE_S"] = "10"

    def run(cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            shlex.split(cmd), env=env, cwd=home, capture_output=True, text=True, timeout=timeout
        )

    sidecar = subprocess.Popen(
        shlex.split(cmds[0]),
        env=env,
        cwd=home,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        wait_for(lambda: run("trainprobe status").returncode in (0,), 30, what="the sidecar")
        worker = subprocess.Popen(
            [PYTHON, str(WORKER), "readme-job", "40"],
            env={**env, "TRAINPROBE_JOB_NAME": "readme demo"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        status = wait_for(
            lambda: (
                (r := run("trainprobe status")).returncode == 0 and "readme demo" in r.stdout and r
            ),
            30,
            what="the worker in status",
        )
        assert "readme-job" in status.stdout
        wait_for(
            lambda: "HUNG" in (r := run("trainprobe status")).stdout and r, 60, what="the hang"
        )
        diag = run("trainprobe diagnose")
        assert diag.returncode == 0, diag.stdout + diag.stderr
        assert "rank 0, the job's only rank, stopped after step 40" in diag.stdout, diag.stdout
        top = subprocess.Popen(
            shlex.split("trainprobe top"),
            env=env,
            cwd=home,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)
        top.send_signal(signal.SIGINT)
        out, err = top.communicate(timeout=30)
        assert "readme" in out, out + err
        wait_for(lambda: worker.poll() is not None, 60, what="the kill")
        diag = run("trainprobe diagnose")
        assert diag.returncode == 0 and "rank 0" in diag.stdout, diag.stdout + diag.stderr
        incidents = wait_for(
            lambda: "readme" in (r := run("trainprobe incidents")).stdout and r,
            30,
            what="the incident in the log",
        )
        assert incidents.returncode == 0
        report = run("trainprobe report --job JOB".replace("JOB", "'readme demo'"), timeout=120)
        assert report.returncode == 0, report.stdout + report.stderr
        assert (home / "trainprobe-report" / "report.html").exists()
    finally:
        for p in (worker, sidecar):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


@pytest.mark.parametrize("cmd", ["trainprobe --help", "trainprobe-sidecar --help"])
def test_the_entry_points_answer(cmd: str) -> None:
    r = subprocess.run(
        shlex.split(cmd),
        env=child_env(PATH=f"{BIN}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "usage" in r.stdout
