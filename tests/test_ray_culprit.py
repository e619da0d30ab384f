"""The job-level view on a real 2-node ``ray.cluster_utils.Cluster``.

Three gloo ranks run as Ray actors: ranks 0 and 1 on the head node, rank 2
on the second node. Rank 2 sleeps inside a step. Its peers wait in the
allreduce, so the head node's sidecar detects the hang first (``sync_inflight``
after 2 s); the second node's own rules would take 30 s (the stall
threshold). Through the job's coordinator actor the head node's sidecar names
rank 2 on the other node, and the second node's sidecar, hearing of the
episode, reads rank 2's stacks and kills it through Ray. The head node's
sidecar sweeps its own ranks, which stay stuck, after ``job_kill_grace_s``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ray_support import pid_running, ray_cluster
from tests.support import free_port, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]

JOB = "two-nodes"


class Rank:
    """A training process as a Ray actor: tests/workers/ddp_worker.py's main, in this actor."""

    def pid(self) -> int:
        return os.getpid()

    def train(self, env: dict[str, str], argv: list[str]) -> int:
        os.environ.update(env)
        import ddp_worker  # tests/workers/ is on the workers' PYTHONPATH

        return ddp_worker.main(argv)


@pytest.fixture
def cluster() -> Iterator[tuple[Any, Any]]:
    with ray_cluster(nodes=2) as (c, workdir):
        yield c, workdir


def test_straggler_on_the_other_node_is_named_and_killed_there(cluster: tuple[Any, Any]) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from trainprobe.sidecar import load_settings
    from trainprobe.sidecar.ray import node_sidecar, start_sidecars
    from trainprobe.sidecar.ray.coordinator import coordinator

    c, workdir = cluster
    settings = load_settings(
        env={},
        cli={
            "state_dir": str(workdir / "state"),
            "sync_timeout_s": "2",
            "stall_timeout_s": "30",
            "heartbeat_timeout_s": "10",
            "job_sync_interval_ms": "200",
            "job_kill_grace_s": "3",
            "on_hung": "kill",
            "hang_patience_s": "0",  # the straggler sleeps: ambiguous, act at the verdict
        },
    )
    placed = start_sidecars(settings)
    assert len(placed) == 2 and all(p.error == "" for p in placed)
    head_id = c.head_node.node_id
    (other_id,) = [p.node_id for p in placed if p.node_id != head_id]
    where = {0: head_id, 1: head_id, 2: other_id}

    port = str(free_port())
    progress = workdir / "progress.jsonl"
    remote = ray.remote(num_cpus=0)(Rank)
    ranks = {
        r: remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote()
        for r, node in where.items()
    }
    pids = dict(zip(ranks, ray.get([a.pid.remote() for a in ranks.values()]), strict=True))
    argv = [
        "--steps", "400", "--step-s", "0.05", "--interval-ms", "100", "--watch-ddp",
        "--hang-rank", "2", "--hang-at", "25", "--after-error", "sleep",
        "--progress", str(progress),
    ]  # fmt: skip
    for r, actor in ranks.items():
        env = {
            "RANK": str(r),
            "WORLD_SIZE": "3",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "TRAINPROBE_JOB_ID": JOB,
            "GLOO_SOCKET_IFNAME": "lo",
        }
        actor.train.remote(env, argv)

    head, other = node_sidecar(head_id), node_sidecar(other_id)

    def incidents(sidecar: Any, kind: str = "incident") -> list[dict[str, Any]]:
        return [
            r
            for r in ray.get(sidecar.incidents.remote())
            if r.get("type") == kind and r.get("job_id") == JOB
        ]

    # The head node detects: its ranks wait in the allreduce for rank 2.
    first = wait_for(lambda: incidents(head), 180, 0.2, "the head node's incident")[0]
    assert first["rule"] == "sync_inflight" and set(first["ranks"]) <= {0, 1}
    d = first["diagnosis"]
    assert d["kind"] == "straggler" and d["culprits"] == [2] and d["waiting"] == [0, 1]
    assert f"(Ray node {other_id[:8]}) never entered allreduce" in d["text"]
    # The culprit is not the head node's to kill: it only observes, and says who acts.
    assert first["targets"] == [] and first["action"] == "observe"
    assert "served by another sidecar" in first["action_reason"]

    # The other node follows the episode: stacks of rank 2, then its kill through Ray.
    second = wait_for(lambda: incidents(other), 30, 0.1, "the other node's incident")[0]
    assert second["rule"] == "remote_episode" and second["ranks"] == [2]
    assert second["evidence"]["2"]["episode"] == first["id"]
    assert second["diagnosis"]["culprits"] == [2] and second["targets"] == [2]
    # A few sync rounds (under a second when quiet), not its own 30 s threshold.
    assert second["time"] - first["time"] < 10.0
    stacks = second["diagnosis"]["stacks"]["2"]
    assert stacks["method"] == "in-process" and "in hang" in stacks["where"]
    assert second["diagnosis"]["text"].endswith(f"rank 2 is stuck at {stacks['where']}")
    kill = wait_for(lambda: incidents(other, "action"), 30, 0.1, "the kill")[0]
    assert kill["outcomes"]["2"]["method"] == "ray.kill" and kill["outcomes"]["2"]["exited"]
    assert not pid_running(pids[2])

    # Where rank 2 was stuck travels back through the coordinator, at the other
    # node's next sync round (every 200 ms here): the kill can land before it.
    def note() -> Any:
        n = ray.get(coordinator(JOB).info.remote())["episode"]
        return n if n is not None and n.where else None

    n = wait_for(note, 10, 0.1, "the culprit's place at the coordinator")
    assert n.id == first["id"] and n.where == {2: stacks["where"]}

    # Ranks 0 and 1 survive the error (--after-error sleep): swept 3 s later.
    sweep = wait_for(lambda: incidents(head, "action"), 30, 0.2, "the sweep")[0]
    assert sweep["phase"] == "job_kill_grace" and sweep["incident_id"] == first["id"]
    assert sorted(sweep["outcomes"]) == ["0", "1"] and sweep["ok"] is True
    assert {o["method"] for o in sweep["outcomes"].values()} == {"ray.kill"}
    wait_for(lambda: not any(pid_running(pids[r]) for r in (0, 1)), 30, what="ranks 0, 1 gone")
    # One incident per sidecar for the whole episode: no DEAD noise from the kills.
    time.sleep(1.0)
    assert [i["id"] for i in incidents(head)] == [first["id"]]
    assert [i["id"] for i in incidents(other)] == [second["id"]]
