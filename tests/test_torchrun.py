"""torchrun --max-restarts: trainprobe kills the hung rank, torchrun restarts, training resumes.

Real torchrun (``python -m torch.distributed.run --standalone``), two gloo
ranks of examples/torchrun_train.py, a real sidecar process. Rank 1 sleeps
inside step 13 on the first attempt only (TORCHELASTIC_RESTART_COUNT=0).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.support import PYTHON, REPO, child_env, read_jsonl, short_tmpdir, sidecar

EXAMPLE = REPO / "examples" / "torchrun_train.py"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_killed_hung_rank_makes_torchrun_restart_from_the_checkpoint() -> None:
    work = short_tmpdir()
    progress, ckpt = work / "progress.jsonl", work / "ckpt"
    cmd = [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        str(EXAMPLE),
        "--ckpt-dir",
        str(ckpt),
        "--steps",
        "30",
        "--ckpt-every",
        "5",
        "--hang-rank",
        "1",
        "--hang-at",
        "13",
        "--progress",
        str(progress),
    ]
    with sidecar("--sync-timeout-s", "2", "--stall-timeout-s", "8") as sc:
        run = subprocess.run(
            cmd,
            env=child_env(TRAINPROBE_TARGET=sc.target),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-4000:]
        events = read_jsonl(progress)
        (hang,) = [e for e in events if e["event"] == "hang"]
        assert hang["rank"] == 1 and hang["step"] == 13
        # trainprobe named rank 1 and killed it, and only it.
        inc = sc.wait_incident(lambda r: r["action"] == "kill", timeout_s=10)
        assert inc["diagnosis"]["culprits"] == [1] and inc["targets"] == [1]
        (action,) = [
            a for a in sc.incidents("action") if a["incident_id"] == inc["id"] and "outcomes" in a
        ]
        assert action["outcomes"]["1"]["pid"] == hang["pid"]
        assert action["outcomes"]["1"]["exited"]
        # Same job id on the second attempt: the sidecar sees rank 1 come back.
        (back,) = sc.incidents("recovery")
        assert back["incident_id"] == inc["id"] and back["rank"] == 1
    starts = [e for e in events if e["event"] == "start"]
    # First attempt from scratch; second from the last checkpoint before the hang.
    assert sorted((s["attempt"], s["rank"], s["resumed_from"]) for s in starts) == [
        (0, 0, 0),
        (0, 1, 0),
        (1, 0, 10),
        (1, 1, 10),
    ]
    second = [e for e in events if e["event"] == "step" and e.get("attempt") == 1]
    assert second and min(e["step"] for e in second) == 11
    done = [e for e in events if e["event"] == "done"]
    assert sorted((d["rank"], d["attempt"]) for d in done) == [(0, 1), (1, 1)]
    # The restarted ranks were new processes, and nobody killed them.
    new_pids = {s["pid"] for s in starts if s["attempt"] == 1}
    assert hang["pid"] not in new_pids
    killed = {o["pid"] for a in sc.incidents("action") for o in a.get("outcomes", {}).values()}
    assert not killed & new_pids
