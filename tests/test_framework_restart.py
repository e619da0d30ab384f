"""Every documented stack comes back by itself after trainprobe's kill.

Real torchrun (``--standalone``, 2 gloo ranks, ``--max-restarts``), a real
sidecar process, the stack's own worker (tests/restart_stacks.py): the plain
script (examples/torchrun_train.py), the Hugging Face Trainer with our
callback (tests/hf_worker.py) and Lightning with our callback, strategy ddp
(tests/lightning_worker.py). On the first attempt only, rank 1 hangs at step
13: it sleeps inside its step, or it SIGSTOPs itself there. Every stack
checkpoints every 5 steps, so the restarted attempt must resume from step
10's checkpoint, and both ranks must finish at step 30.

A SIGSTOPped rank is definitive evidence: the sidecar runs on its shipped
defaults. A sleep is ambiguous, killed after ``hang_patience_s`` (90 s by
default); these tests are about the restart, not the patience, so that case
runs with ``--hang-patience-s 5``. Not 0: a rank that reaches
``init_process_group`` more than ``init_straggler_s`` (5 s) after its peer,
as a loaded 2-core machine may make it, is named too, and must not be killed
at once.

Before the fix, the frameworks' restarted attempt often failed in
``init_process_group`` ("Gloo connectFullMesh failed ... Connection
refused") or hung there: they create the process group before any callback
of ours exists, so the store was never prefixed by the attempt.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.restart_stacks import CKPT_EVERY, HANG_AT, STEPS, stack_args, torchrun
from tests.support import read_jsonl, short_tmpdir, sidecar

pytestmark = pytest.mark.slow

RESUMED_FROM = HANG_AT // CKPT_EVERY * CKPT_EVERY


def check_comes_back(sc: Any, events: list[dict[str, Any]], last: int = 1) -> dict[str, Any]:
    """Rank 1 alone killed at its hang; attempt ``last`` resumed and finished.

    Returns the hang's incident."""
    (hang,) = [e for e in events if e["event"] == "hang"]
    assert hang["rank"] == 1 and hang.get("attempt", 0) == 0
    inc = sc.wait_incident(lambda r: r["action"] == "kill", timeout_s=10)
    assert inc["diagnosis"]["culprits"] == [1] and inc["targets"] == [1]
    (action,) = [
        a for a in sc.incidents("action") if a["incident_id"] == inc["id"] and "outcomes" in a
    ]
    assert action["outcomes"]["1"]["pid"] == hang["pid"] and action["outcomes"]["1"]["exited"]
    starts = {(e["attempt"], e["rank"]): e for e in events if e["event"] == "start"}
    resumed = {r: starts[(last, r)]["resumed_from"] for r in (0, 1)}
    assert resumed == {0: RESUMED_FROM, 1: RESUMED_FROM}
    again = [e for e in events if e["event"] == "step" and e.get("attempt") == last]
    first = {r: min(e["step"] for e in again if e["rank"] == r) for r in (0, 1)}
    assert first == {0: RESUMED_FROM + 1, 1: RESUMED_FROM + 1}
    done = sorted((e["rank"], e["attempt"], e["step"]) for e in events if e["event"] == "done")
    assert done == [(0, last, STEPS), (1, last, STEPS)]
    # The killed rank's replacement was seen stepping; nobody killed the last processes.
    assert any(r["rank"] == 1 for r in sc.incidents("recovery"))
    new_pids = {starts[(last, r)]["pid"] for r in (0, 1)}
    killed = {o["pid"] for a in sc.incidents("action") for o in a.get("outcomes", {}).values()}
    assert hang["pid"] not in new_pids and not killed & new_pids
    stepping = max(min(e["t"] for e in again if e["rank"] == r) for r in (0, 1))
    print(f"\nonset -> every rank stepping again: {stepping - hang['t']:.1f} s")
    return inc


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stack", ["plain", "hf", "lightning"])
@pytest.mark.parametrize("mode", ["sleep", "stop"])
def test_a_killed_hung_rank_comes_back_under_torchrun_max_restarts(stack: str, mode: str) -> None:
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    args = [*stack_args(stack, work, progress), "--hang-rank", "1", "--hang-at", str(HANG_AT)]
    args += ["--hang-how", mode]
    flags = ("--hang-patience-s", "5") if mode == "sleep" else ()
    with sidecar(*flags) as sc:
        run = torchrun(sc.target, args)
        assert run.returncode == 0, run.stderr[-4000:]
        check_comes_back(sc, read_jsonl(progress))


@pytest.mark.timeout(280)
@pytest.mark.parametrize("stack", ["hf", "lightning"])
def test_a_restarted_attempt_hung_in_its_start_up_is_killed_and_comes_back(stack: str) -> None:
    """The frameworks make the process group before our callback exists: the
    start-up hook made at the callback module's import must see it.

    Attempt 0: rank 1 SIGSTOPped at step 13, killed. Attempt 1: rank 1 sleeps
    60 s before the framework's init_process_group while rank 0 waits inside
    it. ``init_straggler`` is a verdict the patience waits on: ``--hang-patience-s
    5`` (this test is about the restart). Attempt 2 resumes from step 10."""
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    args = [*stack_args(stack, work, progress), "--hang-rank", "1", "--hang-at", str(HANG_AT)]
    args += ["--hang-how", "stop", "--init-sleep", "1:1:60"]
    with sidecar("--hang-patience-s", "5") as sc:
        run = torchrun(sc.target, args, restarts=2)
        assert run.returncode == 0, run.stderr[-4000:]
        events = read_jsonl(progress)
        check_comes_back(sc, events, last=2)
        (sleeper,) = [e for e in events if e["event"] == "init_sleep"]
        assert (sleeper["attempt"], sleeper["rank"]) == (1, 1)
        inc = sc.wait_incident(lambda r: r["rule"] == "init_straggler", timeout_s=10)
        assert inc["diagnosis"]["culprits"] == [1] and inc["diagnosis"]["waiting"] == [0]
        assert inc["action"] == "kill" and inc["pids"] == [sleeper["pid"]]
        (acted,) = [
            a for a in sc.incidents("action") if a["incident_id"] == inc["id"] and "outcomes" in a
        ]
        assert acted["outcomes"]["1"]["pid"] == sleeper["pid"]
        assert acted["outcomes"]["1"]["exited"]


#: Attempt 0's start-up hang between the process group and the callback's hook:
#: HF, rank 1 before the Trainer (rank 0 goes on and waits in DDP's construction,
#: which the Trainer runs before on_train_begin).
SET_UP_HANG = {"hf": (1, ["--setup-sleep", "0:1:3600"])}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stack", ["hf"])
def test_a_rank_hung_in_the_frameworks_own_set_up_is_named_in_seconds_and_comes_back(
    stack: str,
) -> None:
    """The window the start-up hook now keeps: the process group exists, the
    callback's hook does not yet (a restarted attempt's checkpoint load sits
    there). The hung rank is named by ``startup_straggler`` about
    ``init_straggler_s`` (5 s) after its peer began waiting, and it alone is
    killed once the start-up patience from its peer's wait is spent
    (``--startup-timeout-s 20`` here, so that the test costs seconds); torchrun
    restarts and both ranks finish. Before, its start-up hook had said Goodbye
    at the process group: nothing but rule ``startup`` could judge, at
    ``startup_timeout_s``, and the rank it named was the waiting peer."""
    culprit, hang = SET_UP_HANG[stack]
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    with sidecar("--startup-timeout-s", "20", "--hang-patience-s", "5") as sc:
        run = torchrun(sc.target, [*stack_args(stack, work, progress), *hang])
        assert run.returncode == 0, run.stderr[-4000:]
        events = read_jsonl(progress)
        (sleeper,) = [e for e in events if e["event"] in ("setup_sleep", "start_sleep")]
        assert (sleeper["attempt"], sleeper["rank"]) == (0, culprit)
        inc = sc.wait_incident(lambda r: r["action"] == "kill", timeout_s=10)
        assert inc["rule"] == "startup_straggler", inc
        assert inc["diagnosis"]["culprits"] == [culprit] and inc["targets"] == [culprit], inc
        assert inc["pids"] == [sleeper["pid"]]
        named = inc["time"] - sleeper["t"]
        print(f"\n{stack}: set-up hang -> named {named:.1f} s")
        assert named < 20, named
        (acted,) = [
            a for a in sc.incidents("action") if a["incident_id"] == inc["id"] and "outcomes" in a
        ]
        assert list(acted["outcomes"]) == [str(culprit)], acted
        assert acted["outcomes"][str(culprit)]["exited"], acted
        killed = {o["pid"] for a in sc.incidents("action") for o in a.get("outcomes", {}).values()}
        assert killed == {sleeper["pid"]}, sc.incidents("action")
        done = sorted((e["rank"], e["attempt"], e["step"]) for e in events if e["event"] == "done")
        assert done == [(0, 1, STEPS), (1, 1, STEPS)]


@pytest.mark.timeout(240)
def test_a_prepare_data_longer_than_the_start_up_timeout_is_no_hang() -> None:
    """Lightning's ``prepare_data`` is where local rank 0 downloads while its peers
    wait in the barrier around it, for as long as the download takes: the
    start-up hook holds it as a phase (judged by ``phase_timeout_s``, 3600 s),
    so a rank 0 there for longer than ``startup_timeout_s`` (20 s here) is
    neither named nor killed, and the job trains to the end in one attempt.
    Watched as a collective (the peers' barrier), it was named a start-up
    straggler in 6 s and killed at the start-up timeout."""
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    with sidecar("--startup-timeout-s", "20", "--hang-patience-s", "5") as sc:
        run = torchrun(
            sc.target,
            [*stack_args("lightning", work, progress), "--start-sleep", "prepare_data:0:30"],
        )
        assert run.returncode == 0, run.stderr[-4000:]
        events = read_jsonl(progress)
        (sleeper,) = [e for e in events if e["event"] == "start_sleep"]
        assert (sleeper["attempt"], sleeper["rank"]) == (0, 0)
        assert not sc.incidents() and not sc.incidents("action"), sc.incidents()
        done = sorted((e["rank"], e["attempt"], e["step"]) for e in events if e["event"] == "done")
        assert done == [(0, 0, STEPS), (1, 0, STEPS)]
