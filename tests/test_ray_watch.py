"""The Ray watcher against a real local Ray (2 CPUs): placement groups that can
never start or merely wait, a two-actor wait cycle, and a wait chain that ends
in a hung actor. Nothing is faked; each test starts and shuts down its own
Ray, and prints its time to finding.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ray_support import fresh_ray
from tests.support import short_tmpdir
from trainprobe.sidecar.core.ray.snapshot import RayFinding
from trainprobe.sidecar.ray.watcher import RayWatcher

pytestmark = [pytest.mark.ray, pytest.mark.slow]

INTERVAL_S = 2.0  # RayWatcher.run's default


@pytest.fixture
def ray() -> Iterator[Any]:
    with fresh_ray(num_cpus=2) as ray:
        yield ray


class Watching:
    """``RayWatcher.run`` on its own asyncio loop in a thread, findings timestamped."""

    def __init__(self, watcher: RayWatcher) -> None:
        self.watcher = watcher
        self.found: list[tuple[float, RayFinding]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        on = lambda f: self.found.append((time.time(), f))  # noqa: E731
        asyncio.run(self.watcher.run(self._stop, on, INTERVAL_S))

    def __enter__(self) -> Watching:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def wait(self, rule: str, timeout_s: float) -> tuple[float, RayFinding]:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            hits = [(t, f) for t, f in self.found if f.rule == rule]
            if hits:
                return hits[0]
            time.sleep(0.1)
        raise AssertionError(f"no {rule} finding in {timeout_s} s; status {self.watcher.status()}")


def train_func(config: dict) -> None:  # never runs: the group never starts
    pass


def test_torch_trainer_asking_more_cpus_than_the_cluster_has(ray: Any) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=4, use_gpu=False),  # 4 CPUs, the cluster has 2
        run_config=RunConfig(name="too-big", storage_path=str(short_tmpdir("tpwatch-"))),
    )

    def fit_until_shutdown() -> None:
        with contextlib.suppress(BaseException):  # ray.shutdown ends it (SystemExit)
            trainer.fit()

    fit = threading.Thread(target=fit_until_shutdown, daemon=True)
    try:
        with Watching(RayWatcher()) as w:
            fit.start()
            at, f = w.wait("placement_group", 30)
    finally:
        # End the waiting controller so fit() returns before ray.shutdown: a fit
        # still running when the cluster goes can make Ray exit this process
        # (the driver), and pytest with it, during the next test.
        from ray.util.state import list_actors

        from trainprobe.sidecar.ray.ending import end_actors

        address = ray.get_runtime_context().gcs_address
        ids = [
            a.actor_id
            for a in list_actors(address=address, filters=[("class_name", "=", "TrainController")])
        ]
        end_actors(ids, no_restart=True, address=address)
        fit.join(60)
    assert not fit.is_alive(), "fit() still runs: ray.shutdown could take the driver down"
    created = at - float(f.evidence["pending_s"]) - (at - f.at)
    latency = at - created
    print(f"\ninfeasible TorchTrainer group: finding {latency:.2f} s after creation: {f.text}")
    assert f.evidence["kind"] == "infeasible"
    assert "ask CPU 4 together; the cluster has CPU 2 on 1 node" in f.text
    assert "a Ray Train worker group waits on it (controller TrainController" in f.text
    assert latency < 10.0


def test_group_that_waits_for_resources_held_by_another_is_no_finding(ray: Any) -> None:
    from ray.util.placement_group import placement_group, remove_placement_group

    holder = placement_group([{"CPU": 2}], name="holder")
    ray.get(holder.ready(), timeout=30)
    waiting = placement_group([{"CPU": 1}, {"CPU": 1}], name="waiting")
    patient, strict = RayWatcher(), RayWatcher(pending_limit_s=3.0)
    start = time.time()
    found: list[RayFinding] = []
    while time.time() - start < 8:  # four snapshots of a group that waits
        found += patient.judge()
        strict_found = strict.judge()
        if strict_found:
            stuck = strict_found[0]
        time.sleep(INTERVAL_S)
    assert found == [], [f.text for f in found]
    # The same snapshots with a 3 s limit: the rule can fire, and names the holder.
    assert stuck.evidence["kind"] == "stuck" and "held by holder of job" in stuck.text
    remove_placement_group(holder)
    ray.get(waiting.ready(), timeout=30)
    after = patient.judge()
    assert after == [] and patient.pg_history.seen == {}
    print(f"\nwaiting group: 0 findings in {time.time() - start:.1f} s; 3 s limit: {stuck.text}")


class Peer:
    def __init__(self) -> None:
        self.other: Any = None

    def meet(self, other: Any) -> None:
        self.other = other

    def f(self) -> int:
        import ray

        return ray.get(self.other.g.remote())  # CYCLE-F

    def g(self) -> int:
        import ray

        return ray.get(self.other.f.remote())  # CYCLE-G


def _line(marker: str) -> int:
    return next(
        i for i, text in enumerate(open(__file__), 1) if marker in text and "_line" not in text
    )


def test_two_actors_that_get_each_others_results(ray: Any) -> None:
    peer = ray.remote(num_cpus=0)(Peer)
    alpha, beta = peer.options(name="alpha").remote(), peer.options(name="beta").remote()
    ray.get([alpha.meet.remote(beta), beta.meet.remote(alpha)])
    with Watching(RayWatcher()) as w:
        start = time.time()
        alpha.f.remote()
        at, f = w.wait("wait_cycle", 30)
    print(f"\nwait cycle: finding {at - start:.2f} s after the first call: {f.text}")
    assert f"test_ray_watch.py:{_line('CYCLE-F')} in Peer.f" in f.text
    assert f"test_ray_watch.py:{_line('CYCLE-G')} in Peer.g" in f.text
    assert "on actor alpha (pid" in f.text and "on actor beta (pid" in f.text
    assert at - start < 15.0


class Hanger:
    def hang(self) -> None:
        time.sleep(3600)


def test_task_chain_waiting_on_a_hung_actor_is_a_chain_not_a_cycle(ray: Any) -> None:
    hanger = ray.remote(num_cpus=0)(Hanger).options(name="hanger").remote()

    @ray.remote(num_cpus=0.5)
    def inner(h: Any) -> None:
        from trainprobe.hooks import ray_wait

        ray_wait.get(h.hang.remote())  # CHAIN-INNER

    @ray.remote(num_cpus=0.5)
    def outer(h: Any) -> None:
        import ray

        ray.get(inner.remote(h))  # CHAIN-OUTER

    watcher = RayWatcher()
    with Watching(watcher) as w:
        start = time.time()
        outer.remote(hanger)
        deadline, text = start + 30, ""
        while time.time() < deadline:
            text = watcher.diagnose() if watcher.graph is not None else ""
            if "head: Hanger.hang on actor hanger" in text and all(
                f"test_ray_watch.py:{_line(m)} in " in text for m in ("CHAIN-OUTER", "CHAIN-INNER")
            ):
                break
            time.sleep(0.5)
        seen = time.time() - start
        time.sleep(2 * INTERVAL_S)  # two more snapshots: still no cycle
    print(f"\nwait chain: head named {seen:.2f} s after the first call:\n{text}")
    assert "head: Hanger.hang on actor hanger" in text
    assert f"waits at test_ray_watch.py:{_line('CHAIN-OUTER')} in " in text
    assert f"waits at test_ray_watch.py:{_line('CHAIN-INNER')} in " in text
    assert "digraph ray_waits" in text
    assert [f for _, f in w.found] == []
    sources = {e.source for e in watcher.graph.edges} if watcher.graph else set()
    assert sources == {"stack", "wrapper"}
