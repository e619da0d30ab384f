"""A held rank on one Ray node never masks a silent hang on another.

Per-node sidecars on a real 2-node ``ray.cluster_utils.Cluster``: rank 0 of a
2-rank job runs as a Ray actor on the head node (sidecar A), rank 1 on the
second node (sidecar B). Each steps with a real hook, found by its node's
socket. Rank 1 then hangs silently (a C call holding the GIL: its reporter
is silent, its kernel shows it sleeping, not held). Rank 0 is:

- ``running``: the control; it steps on;
- ``stopped``: SIGSTOPped 0.5 s before rank 1 hangs, as a person stopping a
  rank to look at it would;
- ``both``: the whole job stopped instead (rank 1 does not hang): a pause.

Each sidecar sees the other node's rank only by its summary through the
job's coordinator actor; a silent rank's summary carries the kernel's word
its own sidecar read (``RankSummary.kernel``). So B kills rank 1 when its
patience (4 s) is spent, as fast with rank 0 held as without; A hears that
rank 1 runs, so it calls nothing paused and kills its stopped rank 0 at once,
as relay mode does (before, A called the job paused: rank 1 counted by its
reports alone); and a job stopped on both nodes is a pause on both, nothing
killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ray_support import kill_leftovers, pid_running, ray_cluster
from tests.support import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]


class Rank:
    """A training process as a Ray actor: steps until told to hang, then holds the GIL."""

    def __init__(self, job: str, rank: int) -> None:
        from trainprobe.hooks import LivenessProbeHook

        self.hook = LivenessProbeHook(job_id=job, rank=rank, world_size=2, interval_ms=100)

    def pid(self) -> int:
        return os.getpid()

    def train(self, trigger: str) -> None:
        """Step every 0.05 s; once ``trigger`` exists, hang silently ("" never)."""
        step = 0
        while not (trigger and os.path.exists(trigger)):
            time.sleep(0.05)
            step += 1
            self.hook.on_step_end(step)
        r, _w = os.pipe()
        ctypes.PyDLL(None).read(r, ctypes.create_string_buffer(1), 1)


@pytest.fixture
def cluster() -> Iterator[tuple[Any, Any]]:
    with ray_cluster(nodes=2) as (c, workdir):
        yield c, workdir


def test_a_silent_hang_on_one_ray_node_is_killed_with_a_held_rank_on_another_as_without(
    cluster: tuple[Any, Any],
) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from trainprobe.sidecar import load_settings
    from trainprobe.sidecar.ray import node_sidecar, start_sidecars

    c, workdir = cluster
    settings = load_settings(
        env={},
        cli={
            "state_dir": str(workdir / "state"),
            "stall_timeout_s": "2",
            "heartbeat_timeout_s": "2",
            "hang_patience_s": "4",
            "kill_grace_s": "0.5",
            "job_kill_grace_s": "60",  # a sweep within the 40 s below is never that
            "job_sync_interval_ms": "200",
            "tick_interval_ms": "50",
        },
    )
    placed = start_sidecars(settings)
    assert len(placed) == 2 and all(p.error == "" for p in placed)
    head_id = c.head_node.node_id
    (other_id,) = [p.node_id for p in placed if p.node_id != head_id]
    side = {head_id: node_sidecar(head_id), other_id: node_sidecar(other_id)}
    remote = ray.remote(num_cpus=0, max_concurrency=2)(Rank)

    def records(node: str, job: str, kind: str) -> list[dict[str, Any]]:
        got = ray.get(side[node].incidents.remote())
        return [r for r in got if r.get("type") == kind and r.get("job_id") == job]

    def paused(node: str, job: str) -> list[dict[str, Any]]:
        return [d for d in records(node, job, "decision") if d["rule"] == "paused"]

    took: dict[str, float] = {}
    for rank0 in ("running", "stopped", "both"):
        job = f"ray-held-{rank0}"
        trigger = workdir / f"hang-{rank0}"
        actors = [
            remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote(job, r)
            for r, node in enumerate((head_id, other_id))
        ]
        pids = ray.get([a.pid.remote() for a in actors])
        try:
            actors[0].train.remote("")  # rank 0 never hangs
            actors[1].train.remote(str(trigger))

            def stepping(job: str = job) -> bool:
                rows = [ray.get(side[n].status.remote(job)) for n in (head_id, other_id)]
                return all(any(r["step"] > 5 for r in rs) for rs in rows)

            wait_for(stepping, 90, 0.2, "both ranks stepping on their own node's sidecar")
            if rank0 == "both":
                # The whole job stopped, one rank on each node: a pause on both
                # sidecars, each on its own kernel's word and the other's.
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                for node in (head_id, other_id):
                    wait_for(lambda n=node, j=job: paused(n, j), 30, 0.2, "a pause on each node")
                time.sleep(3.0)  # patience 4 s from the silence: a kill would come now
                assert all(pid_running(p) for p in pids), "a rank of the paused job was killed"
                assert all("ranks [0, 1]" in paused(n, job)[0]["why"] for n in (head_id, other_id))
                continue
            if rank0 == "stopped":
                os.kill(pids[0], signal.SIGSTOP)
                time.sleep(0.5)
            trigger.touch()
            onset = time.monotonic()
            wait_for(lambda p=pids[1]: not pid_running(p), 40, 0.1, f"rank 1 killed ({rank0})")
            took[rank0] = time.monotonic() - onset
            assert paused(other_id, job) == []
            wait_for(
                lambda j=job: [k for k in records(other_id, j, "action") if "1" in k["outcomes"]],
                20,
                0.2,
                "B's action record of rank 1",
            )
            if rank0 == "stopped":
                # Node A hears B's word (rank 1 runs): no pause; rank 0 is its
                # definitive culprit, killed at once, as in relay mode.
                assert paused(head_id, job) == [], paused(head_id, job)
                wait_for(lambda p=pids[0]: not pid_running(p), 20, 0.1, "rank 0 killed by A")
                (act,) = [d for d in records(head_id, job, "decision") if d["act"]]
                assert act["rule"] == "stopped", act
            print(f"rank 0 {rank0}: rank 1 killed {took[rank0]:.1f}s after it hung")
        finally:
            for a in actors:
                with contextlib.suppress(Exception):
                    ray.kill(a)
            kill_leftovers(pids)
    # As fast with rank 0 held as without (the patience, 4 s, from rank 1's silence).
    assert took["stopped"] <= took["running"] + 3.0, took
