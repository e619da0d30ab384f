"""Ray Train end to end: a real local Ray, the per-node sidecar actor, a real
TorchTrainer with 2 CPU (gloo) workers. Nothing is faked.

Both tests share one Ray instance and one sidecar (module fixture); each run
has its own RunConfig name, which is the job id the hooks report.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from tests.ray_support import (
    RAY_TRAIN_SIDECAR,
    RAY_TRAIN_STARTUP_S,
    import_as_ray_workers_do,
    job_records,
    pid_running,
    ray_node_with_sidecar,
    start_up_hang_caught,
    start_up_hang_trainer,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STALL_S = float(RAY_TRAIN_SIDECAR["stall_timeout_s"])
STEPS = 25
CKPT_EVERY = 5
HANG_AT = 13  # after the checkpoint of step 10
STARTUP_S = RAY_TRAIN_STARTUP_S


@pytest.fixture(scope="module")
def ray_node() -> Iterator[SimpleNamespace]:
    # The restart path through Ray Train, not the patience; the start-up patience
    # shortened (bench/bench_ray_startup.py runs the same node).
    with ray_node_with_sidecar(RAY_TRAIN_SIDECAR) as node:
        node.job = import_as_ray_workers_do("ray_train_job")
        yield node


def test_hung_worker_is_killed_through_ray_and_training_resumes(ray_node: SimpleNamespace) -> None:
    job, workdir = ray_node.job, ray_node.workdir
    progress = workdir / "hang.jsonl"
    trainer = job.make_trainer(
        {
            "steps": STEPS,
            "ckpt_every": CKPT_EVERY,
            "hang_rank": 1,
            "hang_at": HANG_AT,
            "progress": str(progress),
        },
        storage_path=str(workdir / "storage"),
        name="tp-hang",
        max_failures=1,
    )
    result = trainer.fit()
    assert result.error is None
    assert result.metrics["step"] == STEPS

    # Every step ran on both ranks, over two attempts; the second one resumed
    # from the checkpoint of step 10. Every hook reported the run name as job.
    stepped = {(e["rank"], e["step"]) for e in job.read_events(progress, "step")}
    assert stepped == {(r, s) for r in (0, 1) for s in range(1, STEPS + 1)}
    starts = job.read_events(progress, "start")
    first = {e["rank"]: e for e in starts if e["restored_step"] == 0}
    second = {e["rank"]: e for e in starts if e["restored_step"] == 10}
    assert len(starts) == 4 and set(first) == set(second) == {0, 1}
    assert {e["job_id"] for e in starts} == {"tp-hang"}
    assert all(e["target"] == ray_node.sidecar.socket for e in starts)
    (hang,) = job.read_events(progress, "hang")

    records = job_records(ray_node, "tp-hang")
    incidents = [r for r in records if r["type"] == "incident"]
    assert len(incidents) == 1, records
    inc = incidents[0]
    assert (inc["rule"], inc["verdict"], inc["action"]) == ("stall", "HUNG", "restart")
    assert 1 in inc["ranks"]
    assert STALL_S <= inc["detection_latency_s"] < STALL_S + 1.0

    (action,) = [r for r in records if r["type"] == "action"]
    assert action["incident_id"] == inc["id"] and action["ok"] is True
    for rank in inc["targets"]:
        out = action["outcomes"][str(rank)]
        assert out["method"] == "ray.kill"
        assert out["actor_id"] == first[rank]["actor_id"]
        assert out["no_restart"] is False  # restart: Ray Train brings the group back
        assert out["pid"] == first[rank]["pid"] and out["pid_gone"] is True
        assert out["actor_state"] == "DEAD"
        assert "ray.kill" in out["death_cause"]
        assert not pid_running(out["pid"])
    assert not pid_running(hang["pid"])

    recoveries = {r["rank"]: r for r in records if r["type"] == "recovery"}
    assert set(recoveries) == set(inc["targets"])
    for rank, rec in recoveries.items():
        assert rec["incident_id"] == inc["id"]
        assert rec["new_pid"] == second[rank]["pid"]
        assert rec["first_step"] == 11
        assert 0 < rec["reconnected_after_s"] <= rec["resumed_after_s"]


def test_with_watch_ddp_only_the_culprit_is_killed_and_a_start_up_hang_after_the_restart_too(
    ray_node: SimpleNamespace,
) -> None:
    """The sidecar names rank 1 (rank 0 waits in the allreduce) and kills only it;
    Ray Train ends rank 0 itself, and that end is part of the episode, not a
    new incident. Ray Train's restarted group then hangs in its start-up: rank
    1 sleeps after making its hook, before its first step, while rank 0 waits
    in that step's allreduce. It is named in seconds (rule ``startup_straggler``,
    ``init_straggler_s`` after rank 0 began waiting), killed through Ray, rank 1
    alone, after the start-up patience (``startup_timeout_s``, counted from rank
    0's wait), and Ray Train's second restart finishes the run."""
    job, workdir = ray_node.job, ray_node.workdir
    progress = workdir / "culprit.jsonl"
    trainer = start_up_hang_trainer(
        ray_node, "tp-culprit", progress, steps=STEPS, hang_at=HANG_AT, ckpt_every=CKPT_EVERY
    )
    result = trainer.fit()
    assert result.error is None and result.metrics["step"] == STEPS
    events = job.read_events(progress)
    starts = [e for e in events if e["event"] == "start"]
    first = {e["rank"]: e for e in starts if e["restored_step"] == 0}
    assert sorted((e["restored_step"], e["rank"]) for e in starts) == [
        (0, 0),
        (0, 1),
        (10, 0),
        (10, 0),
        (10, 1),
        (10, 1),
    ]
    (hang,) = [e for e in events if e["event"] == "hang"]
    # The restarted group's start-up hang: rank 1 alone named and killed.
    stuck, again = start_up_hang_caught(ray_node, "tp-culprit", events, STARTUP_S)
    last = {e["rank"]: e for e in starts}  # the group that finished
    assert last[1]["pid"] != stuck["pid"] and last[0]["t"] > stuck["t"]
    done = sorted((e["rank"], e["pid"]) for e in events if e["event"] == "done")
    assert done == [(0, last[0]["pid"]), (1, last[1]["pid"])]

    records = job_records(ray_node, "tp-culprit")
    inc, second = [r for r in records if r["type"] == "incident"]
    assert second["id"] == again["id"]
    d = inc["diagnosis"]
    assert d["kind"] == "straggler" and d["culprits"] == [1] and d["waiting"] == [0]
    stack = d["stacks"]["1"]
    assert stack["method"] == "in-process" and "ray_train_job.py" in stack["where"]
    assert "in train_func" in stack["stacks"]  # where: the innermost frame, the fault's hang()
    assert inc["targets"] == [1] and inc["action"] == "restart"
    actions = {a["incident_id"]: a for a in records if a["type"] == "action" and "phase" not in a}
    assert set(actions) == {inc["id"], again["id"]}
    assert list(actions[inc["id"]]["outcomes"]) == ["1"]
    out = actions[inc["id"]]["outcomes"]["1"]
    assert out["method"] == "ray.kill" and out["pid"] == hang["pid"]
    # Rank 0 was ended by Ray Train each time (its collective failed; it said
    # goodbye or vanished): no further incident, no DEAD noise, no sweep by us.
    ids = {inc["id"], again["id"]}
    assert all(u["incident_id"] in ids for u in records if u["type"] == "incident_update")
    assert not pid_running(first[0]["pid"]) and not pid_running(first[1]["pid"])
    stepping = max(
        min(
            e["t"]
            for e in events
            if e["event"] == "step" and e["t"] > stuck["t"] and e["rank"] == r
        )
        for r in (0, 1)
    )
    print(f"start-up hang -> every rank stepping again {stepping - stuck['t']:.1f} s")


def test_healthy_run_ends_without_incident(ray_node: SimpleNamespace) -> None:
    import ray

    from trainprobe.sidecar.ray import node_sidecar

    job, workdir = ray_node.job, ray_node.workdir
    progress = workdir / "healthy.jsonl"
    trainer = job.make_trainer(
        {"steps": 15, "ckpt_every": CKPT_EVERY, "progress": str(progress)},
        storage_path=str(workdir / "storage"),
        name="tp-healthy",
    )
    result = trainer.fit()
    assert result.error is None and result.metrics["step"] == 15
    # The sidecar watched both ranks to the end, and they said goodbye...
    rows = ray.get(node_sidecar(ray_node.sidecar.node_id).status.remote("tp-healthy"))
    assert sorted((w["rank"], w["step"], w["state"]) for w in rows) == [
        (0, 15, "goodbye"),
        (1, 15, "goodbye"),
    ]
    # Identity from Ray Train alone: ranks, world size, the Ray ids.
    assert {(w["local_rank"], w["world_size"]) for w in rows} == {(0, 2), (1, 2)}
    assert all(w["ray"]["actor_id"] and w["ray"]["trial_or_run_name"] for w in rows)
    # ...so there is nothing in the incident log for this job.
    assert job_records(ray_node, "tp-healthy") == []
