"""Lightning and the Hugging Face Trainer inside Ray Train come back after our kill.

A real local Ray, trainprobe's per-node sidecar on its shipped defaults (but
the start-up patience, below), a
real TorchTrainer with 2 CPU (gloo) workers running Ray's own integration of
each framework with trainprobe's callback beside it
(tests/workers/ray_frameworks.py). On the first attempt rank 1 SIGSTOPs
itself as step 14 begins (once Ray Train has registered step 10's
checkpoint), rank 0 waits in the gradient allreduce. A stopped
rank is definitive evidence: the sidecar names rank 1 and kills it through
Ray in seconds; Ray Train's ``FailureConfig`` starts the group again from the
checkpoint of step 10.

That restarted group then hangs in its start-up, as the plain loop's does in
tests/test_ray_train.py (the same fault, examples/ray_train_job.py's
``hang_at_start``): rank 1 sleeps where the framework starts training, after
trainprobe's callback made its hook, before its first step, while rank 0
waits in the collective that step begins with (Lightning's broadcast, the
Trainer's ``accelerator.gather``: the callbacks watch both). It is named
by rule ``startup_straggler`` in seconds, killed alone through Ray once the
start-up patience is spent, and ``max_failures=2`` lets a third group end the
run at step 20. Under Ray Train the process group exists before anything of
ours runs, so the callback's hook (Lightning's ``setup``, the Trainer's
``on_train_begin``) is the earliest place a restarted group's start-up can be
seen; docs/RECOVERY.md says what catches a hang before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from tests.ray_support import (
    import_as_ray_workers_do,
    job_records,
    pid_running,
    ray_node_with_sidecar,
    start_up_hang_caught,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS, CKPT_EVERY, HANG_AT = 20, 5, 13
RESUMED_FROM = HANG_AT // CKPT_EVERY * CKPT_EVERY
#: The start-up patience (600 s shipped), shortened where only the path matters.
STARTUP_S = 10.0


@pytest.fixture(scope="module")
def ray_node() -> Iterator[SimpleNamespace]:
    # Shipped defaults but the start-up hang's kill, which waits for the longer
    # of the start-up patience and the hang patience (auto: 90 s at least).
    settings = {"startup_timeout_s": str(STARTUP_S), "hang_patience_s": "0"}
    with ray_node_with_sidecar(settings) as node:
        node.job = import_as_ray_workers_do("ray_train_job")
        node.stacks = import_as_ray_workers_do("ray_frameworks")
        yield node


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stack", ["lightning", "hf"])
def test_a_stopped_rank_is_killed_then_a_start_up_hang_and_ray_train_resumes_the_framework(
    ray_node: SimpleNamespace, stack: str
) -> None:
    job, workdir = ray_node.job, ray_node.workdir
    progress = workdir / f"{stack}.jsonl"
    name = f"tp-{stack}"
    config = {
        "steps": STEPS,
        "ckpt_every": CKPT_EVERY,
        "hang_rank": 1,
        "hang_at": HANG_AT,
        "progress": str(progress),
        "ray_checkpoints": str(workdir / "storage" / name / "checkpoint_manager_snapshot.json"),
        "start_hang": str(workdir / f"{name}.start_hang"),
    }
    loop = getattr(ray_node.stacks, f"{stack}_train_func")
    trainer = job.make_trainer(
        config, str(workdir / "storage"), name, max_failures=2, train_loop=loop
    )
    result = trainer.fit()
    assert result.error is None
    assert result.metrics["step"] == STEPS

    events = job.read_events(progress)
    (hang,) = [e for e in events if e["event"] == "hang"]
    assert (hang["rank"], hang["step"]) == (1, HANG_AT)
    starts = [e for e in events if e["event"] == "start"]
    assert sorted((e["restored_step"], e["rank"]) for e in starts) == [
        (0, 0),
        (0, 1),
        (RESUMED_FROM, 0),
        (RESUMED_FROM, 0),
        (RESUMED_FROM, 1),
        (RESUMED_FROM, 1),
    ]
    # The group that finished (its start-up hung in the one before).
    again = {e["rank"]: e for e in starts if e["restored_step"] == RESUMED_FROM}
    steps = [e for e in events if e["event"] == "step" and e["restored"] == RESUMED_FROM]
    assert {(e["rank"], e["step"]) for e in steps} == {
        (r, s) for r in (0, 1) for s in range(RESUMED_FROM + 1, STEPS + 1)
    }
    done = sorted((e["rank"], e["step"], e["restored"]) for e in events if e["event"] == "done")
    assert done == [(0, STEPS, RESUMED_FROM), (1, STEPS, RESUMED_FROM)]

    # Rank 1 alone named and killed, through Ray, each time. Ray Train ends
    # rank 0 (or, on a slow machine, a sweep of what the old group left: a
    # record with a phase).
    records = job_records(ray_node, name)
    stuck, startup = start_up_hang_caught(ray_node, name, events, STARTUP_S)
    inc, second = [r for r in records if r["type"] == "incident"]
    assert second["id"] == startup["id"]
    assert inc["diagnosis"]["culprits"] == [1] and inc["targets"] == [1], inc
    actions = [r for r in records if r["type"] == "action" and "phase" not in r]
    assert [a["incident_id"] for a in actions] == [inc["id"], startup["id"]], actions
    assert list(actions[0]["outcomes"]) == ["1"]
    out = actions[0]["outcomes"]["1"]
    assert out["method"] == "ray.kill" and out["pid"] == hang["pid"] and out["pid_gone"]
    assert out["signalled_first"] == "SIGKILL"  # stopped: it cannot run Ray's exit
    assert not pid_running(hang["pid"])
    assert stuck["pid"] not in {hang["pid"], again[1]["pid"]} and again[0]["t"] > stuck["t"]
    recovered = [r for r in records if r["type"] == "recovery" and r["rank"] == 1]
    assert recovered[-1]["new_pid"] == again[1]["pid"], recovered
    assert recovered[-1]["first_step"] == RESUMED_FROM + 1, recovered
    killed = {
        o["pid"] for a in records if a["type"] == "action" for o in a.get("outcomes", {}).values()
    }
    assert not killed & {e["pid"] for e in again.values()}
    stepping = max(min(e["t"] for e in steps if e["rank"] == r) for r in (0, 1))
    print(f"{stack}: start-up hang -> every rank stepping again {stepping - stuck['t']:.1f} s")
