"""Hugging Face Trainer under ``trainprobe run``: ReplicatedCallback beside
LivenessProbeCallback (tests/replicated_hf_worker.py: a one-layer GPT-2 from a
config), 2 replica groups of one CPU rank, a real lighthouse and the real
sidecar with its shipped defaults.

A replica that sleeps in its training_step: the sidecar evicts its group, the
survivor's fit goes on in the same process, the launcher restarts the evicted
group, which fetches the survivor's state and trains on at its step; both fits
end at the same committed step with equal parameters. Healthy, in groups of 2
ranks with 2 micro-batches a step: evaluations and checkpoints on every
replica evict nothing, every rank ends with the same parameters, and both are counted in committed
steps (a checkpoint is named by the committed count, even in the group that
joined late).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import PYTHON, REPO, SidecarProcess, short_tmpdir, wait_for
from tests.test_replicated_run import destructive, launched

pytest.importorskip("torchft")
pytest.importorskip("transformers")

WORKER = REPO / "tests" / "replicated_hf_worker.py"
pytestmark = pytest.mark.timeout(240)


def test_a_sleeping_trainer_replica_is_evicted_and_rejoins_the_other_goes_on() -> None:
    work: Path = short_tmpdir("tphf-")
    with SidecarProcess(work) as sc:
        script = [PYTHON, str(WORKER), "--progress", str(work / "progress.jsonl")]
        script += ["--marker", str(work / "hang.done"), "--output-dir", str(work / "out")]
        script += ["--steps", "150", "--hang-at", "10"]
        with launched(work, sc.target, "--replicas", "2", script=script) as run:
            hang = wait_for(lambda: run.rows("hang"), 150, 0.1, "the hang")[0]
            survivor = run.rows("step", 0)[0]["pid"]
            resumed = wait_for(
                lambda: [r for r in run.rows("step", 0) if r["committed"] > hang["committed"]],
                60,
                0.1,
                "the survivor to commit past the hang",
            )[0]
            rejoined = wait_for(
                lambda: [r for r in run.rows("step", 1) if r["pid"] != hang["pid"]],
                120,
                0.2,
                "the restarted replica to step",
            )[0]
            assert run.proc.wait(180) == 0, run.text()[-3000:]
        actions = destructive(sc)
    assert resumed["pid"] == survivor
    # The rejoined replica trains on at its peer's step, not from 0.
    assert rejoined["committed"] > hang["committed"] and rejoined["step"] == rejoined["committed"]
    done = {r["rank"]: r for r in run.rows("done")}
    assert done[0]["pid"] == survivor and done[1]["pid"] not in (hang["pid"], None)
    assert done[0]["committed"] == done[1]["committed"] == 150
    assert done[0]["params"] == pytest.approx(done[1]["params"], abs=1e-6)
    assert [a["action"] for a in actions] == ["evict"], actions
    assert actions[0]["evicted_replicas"] == ["replica_1"]
    pids = [o.get("pid") for o in (actions[0].get("outcomes") or {}).values()]
    assert pids == [hang["pid"]], actions  # the waiting replica was never signalled
    print(f"survivor committed again {resumed['t'] - hang['t']:.1f} s after onset")


def test_evaluations_and_checkpoints_on_every_replica_evict_nothing() -> None:
    # Groups of 2 ranks (accelerate's DDP inside each), 2 micro-batches a step.
    work: Path = short_tmpdir("tphf-")
    with SidecarProcess(work) as sc:
        script = [PYTHON, str(WORKER), "--progress", str(work / "progress.jsonl")]
        script += ["--marker", str(work / "hang.done"), "--output-dir", str(work / "out")]
        script += ["--steps", "40", "--eval-every", "10", "--save-every", "20", "--accumulate", "2"]
        script += ["--min-replicas", "2"]  # both groups in step 0's quorum: torchft syncs them
        flags = ("--replicas", "2", "--nproc-per-replica", "2")
        with launched(work, sc.target, *flags, script=script) as run:
            assert run.proc.wait(180) == 0, run.text()[-3000:]
        actions = destructive(sc)
    assert actions == []
    done = run.rows("done")
    assert sorted((r["rank"], r["group_rank"]) for r in done) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {r["committed"] for r in done} == {40}
    for r in done[1:]:
        assert r["params"] == pytest.approx(done[0]["params"], abs=1e-6)
    for group in (0, 1):
        pids = {r["pid"] for r in done if r["rank"] == group}
        assert {r["pid"] for r in run.rows("step", group)} == pids  # no restart
        evaluated = [r["step"] for r in run.rows("evaluation", group)]
        assert evaluated and all(s % 10 == 0 for s in evaluated), evaluated
        assert 40 in evaluated
        assert (work / "out" / f"replica{group}" / "checkpoint-40").is_dir()
