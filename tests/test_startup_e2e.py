"""Start-up hangs under real torchrun: the hook made before init_process_group.

Real torchrun (``python -m torch.distributed.run --standalone``), gloo ranks
of tests/workers/restart_init.py with a plain ``dist.init_process_group``, a
real sidecar process. A rank that sleeps before init_process_group while its
peers wait inside it is named with its stack and the peers it holds up; a
short, healthy delay is named but never killed; torchrun's restarts come
through init_process_group every time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import PYTHON, REPO, child_env, read_jsonl, short_tmpdir, sidecar, wait_for

WORKER = REPO / "tests" / "workers" / "restart_init.py"


def torchrun_cmd(progress: Path, nproc: int, restarts: int, *args: str) -> list[str]:
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


def torchrun(
    target: str, progress: Path, nproc: int, restarts: int, *args: str, timeout_s: float = 240
) -> subprocess.CompletedProcess[str]:
    cmd = torchrun_cmd(progress, nproc, restarts, *args)
    env = child_env(TRAINPROBE_TARGET=target, PG_TIMEOUT_S="300")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rank_stuck_before_init_is_named_with_its_stack_and_peers_then_killed() -> None:
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    # Rank 1 sleeps 600 s before init_process_group on attempt 0; ranks 0 and 2 wait.
    with sidecar("--hang-patience-s", "15") as sc:
        run = torchrun(sc.target, progress, 3, 1, "0", "--init-sleep", "1:600")
        assert run.returncode == 0, run.stderr[-4000:]
        inc = sc.wait_incident(lambda r: r["rule"] == "init_straggler", timeout_s=10)
        events = read_jsonl(progress)
        first = [e for e in events if e["attempt"] == 0]
        (sleeper,) = [e for e in first if e["event"] == "init_sleep"]
        assert sleeper["rank"] == 1
        assert inc["ranks"] == [1] and inc["pids"] == [sleeper["pid"]]
        diag = inc["diagnosis"]
        assert diag["culprits"] == [1] and diag["waiting"] == [0, 2]
        assert "has not reached init_process_group" in diag["summary"]
        # Its stack: where it is (the sleep in the worker), not torch's rendezvous.
        assert "restart_init.py" in diag["where"]["1"], diag["where"]
        # Named at most 10 s after the last peer entered init_process_group.
        peers_in = max(e["t"] for e in first if e["event"] == "init_enter")
        assert inc["time"] - peers_in <= 10.0, (inc["time"], peers_in)
        # Killed after the patience (only rank 1), and torchrun's restart went through.
        assert inc["action"] == "kill" and inc["targets"] == [1]
        (acted,) = [a for a in sc.incidents("action") if "outcomes" in a]
        assert acted["incident_id"] == inc["id"]
        assert list(acted["outcomes"]) == ["1"]
        assert acted["outcomes"]["1"]["pid"] == sleeper["pid"] and acted["outcomes"]["1"]["exited"]
    second = [e for e in read_jsonl(progress) if e["attempt"] == 1]
    assert sorted(e["rank"] for e in second if e["event"] == "done") == [0, 1, 2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_healthy_slow_rendezvous_is_never_killed() -> None:
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    # Rank 1 takes 25 s before init_process_group (a slow data read, say).
    with sidecar() as sc:
        run = subprocess.Popen(
            torchrun_cmd(progress, 2, 0, "0", "--init-sleep", "1:25"),
            env=child_env(TRAINPROBE_TARGET=sc.target, PG_TIMEOUT_S="300"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            rows = wait_for(lambda: len(ws := list(sc.status().workers)) == 2 and ws, 60)
            # One human name on both ranks: the script and torchrun's agent's start time
            # (--standalone's run id is a made-up UUID, the job id).
            names = {w.job_name for w in rows}
            assert len(names) == 1 and names.pop().startswith("restart_init.py 20"), rows
            assert {w.job_id for w in rows} != {w.job_name for w in rows}
            shown = subprocess.run(
                [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "status", "--target", sc.target],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            assert rows[0].job_name in shown, shown
            _, err = run.communicate(timeout=200)
        finally:
            run.kill()
        assert run.returncode == 0, err[-4000:]
        events = read_jsonl(progress)
        assert sorted(e["rank"] for e in events if e["event"] == "done") == [0, 1]
        named = [r for r in sc.incidents() if r["rule"] == "init_straggler"]
        assert [r["ranks"] for r in named] == [[1]]  # a verdict is cheap...
        assert named[0]["diagnosis"]["culprits"] == [1]
        assert not [a for a in sc.incidents("action") if a.get("outcomes")]  # ...a kill is not


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_torchrun_restarts_pass_a_plain_init_process_group() -> None:
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    # Rank 1 fails after its first step on attempts 0..2: three restarts, each
    # through a plain init_process_group on torchrun's one shared store.
    with sidecar() as sc:
        run = torchrun(sc.target, progress, 2, 3, "3", timeout_s=300)
        assert run.returncode == 0, run.stderr[-4000:]
    events = read_jsonl(progress)
    inits = sorted((e["attempt"], e["rank"]) for e in events if e["event"] == "init_done")
    assert inits == [(a, r) for a in range(4) for r in range(2)]
    assert sorted(e["rank"] for e in events if e["event"] == "done" and e["attempt"] == 3) == [0, 1]
