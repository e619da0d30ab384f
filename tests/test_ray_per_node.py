"""One sidecar per Ray node, on a real 2-node ``ray.cluster_utils.Cluster``.

Both "nodes" run on this machine and share /tmp, which is exactly why each
sidecar listens on a socket named after its node id. The second node joins
after the first ``start_sidecars()`` call, as a node added by an autoscaler
would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ray_support import pid_running, ray_cluster
from tests.support import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]


class Prober:
    """A Ray actor running a hook, as a training process would (no target given)."""

    def __init__(self, rank: int) -> None:
        from trainprobe.hooks import LivenessProbeHook

        self.hook = LivenessProbeHook(job_id="per-node", rank=rank, world_size=2, interval_ms=100)

    def step(self, n: int) -> dict[str, Any]:
        for i in range(1, n + 1):
            self.hook.on_step_end(i)
            time.sleep(0.02)
        deadline = time.monotonic() + 30
        while not (self.hook.connected and self.hook.ray_handle.registered):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        ident = self.hook.identity
        return {
            "pid": ident.pid,
            "node_id": ident.ray.node_id,
            "target": self.hook.target,
            "connected": self.hook.connected,
            "handle_registered": self.hook.ray_handle.registered,
        }

    def close(self) -> None:
        self.hook.close()


@pytest.fixture
def cluster() -> Iterator[tuple[Any, Path]]:
    with ray_cluster(nodes=1) as (c, workdir):  # the test adds the second
        yield c, workdir


def test_each_node_gets_its_own_sidecar_and_its_hooks_report_there(
    cluster: tuple[Any, Path],
) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from ray.util.state import list_actors

    from trainprobe.proto import RAY_NAMESPACE
    from trainprobe.sidecar import load_settings
    from trainprobe.sidecar.ray import node_sidecar, start_sidecars, stop_sidecars

    cluster_, workdir = cluster
    settings = load_settings(env={}, cli={"state_dir": str(workdir / "state")})
    (head,) = start_sidecars(settings)
    assert head.created and head.error == ""

    cluster_.add_node(num_cpus=1)
    cluster_.wait_for_nodes()
    placed = {p.node_id: p for p in start_sidecars(settings)}
    assert len(placed) == 2
    assert not placed[head.node_id].created and placed[head.node_id].pid == head.pid
    (joined,) = [p for p in placed.values() if p.node_id != head.node_id]
    assert joined.created and joined.error == ""
    # Idempotent: a third call creates nothing and finds the same actors.
    again = {p.node_id: p for p in start_sidecars(settings)}
    assert {(n, p.pid, p.created) for n, p in again.items()} == {
        (n, p.pid, False) for n, p in placed.items()
    }
    assert len({p.socket for p in placed.values()}) == 2
    assert len({p.incident_log for p in placed.values()}) == 2

    # One hook on each node, given no address: each finds its own node's sidecar.
    remote = ray.remote(num_cpus=0)(Prober)
    probers = {
        node_id: remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote(rank)
        for rank, node_id in enumerate(sorted(placed))
    }
    seen = dict(zip(probers, ray.get([p.step.remote(5) for p in probers.values()]), strict=True))
    for node_id, info in seen.items():
        assert info["node_id"] == node_id
        assert info["target"] == placed[node_id].socket
        assert info["connected"] and info["handle_registered"]
        sidecar = node_sidecar(node_id)
        rows = wait_for(
            lambda s=sidecar: next(
                (
                    rows
                    for rows in [ray.get(s.status.remote("per-node"))]
                    if any(r["step"] == 5 for r in rows)
                ),
                None,
            ),
            10,
            what="step 5 in the sidecar's status",
        )
        # This node's worker, and nothing from the other node.
        assert [(r["pid"], r["ray"]["node_id"], r["step"]) for r in rows] == [
            (info["pid"], node_id, 5)
        ]
        assert ray.get(node_sidecar(node_id).info.remote())["handles"] == 1
    ray.get([p.close.remote() for p in probers.values()])
    for p in probers.values():
        ray.kill(p)

    sidecar_pids = [p.pid for p in placed.values()]
    assert sorted(stop_sidecars()) == sorted(placed)
    # Clean: no named actor left, sockets removed, the actor processes gone.
    assert [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == RAY_NAMESPACE
    ] == []
    for p in placed.values():
        assert not Path(p.socket.removeprefix("unix://")).exists()
    wait_for(lambda: not any(pid_running(pid) for pid in sidecar_pids), 20, what="sidecars exit")
    states = {a.state for a in list_actors(filters=[("class_name", "=", "NodeSidecar")])}
    assert states == {"DEAD"}
