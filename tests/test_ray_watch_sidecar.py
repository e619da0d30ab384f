"""The Ray watcher inside a real sidecar process started with ``--ray-address``,
against a real local Ray (2 CPUs): an infeasible placement group becomes an
incident in the incident log and shows in ``trainprobe status``;
``trainprobe diagnose --ray`` prints the wait graph; ``on_ray_finding=kill``
ends the actors of a real two-actor wait cycle. Nothing is faked.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.otel_support import OtlpReceiver
from tests.ray_support import fresh_ray, pid_running
from tests.support import SidecarProcess, ctl, free_port, short_tmpdir, wait_for
from tests.test_otel_export import FAST_EXPORT, samples_of, scrape

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: Snapshots every second: the goal (infeasible group reported within 10 s)
#: holds at the 2 s default too; 1 s keeps the test short.
WATCH = {"TRAINPROBE_RAY_WATCH_INTERVAL_S": "1"}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[SimpleNamespace]:
    with fresh_ray(num_cpus=2) as ray:
        yield SimpleNamespace(ray=ray, gcs=ray.get_runtime_context().gcs_address)


def _joined(sc: SidecarProcess) -> None:
    wait_for(lambda: "connected to Ray" in sc.log_text(), 90, what="sidecar joins Ray")


def test_infeasible_group_is_an_incident_and_shows_in_status(local_ray: SimpleNamespace) -> None:
    from ray.util.placement_group import placement_group, remove_placement_group

    ray = local_ray.ray
    job = ray.get_runtime_context().get_job_id()
    port = free_port()
    metrics = ["--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
    with (
        OtlpReceiver() as rcv,
        SidecarProcess(
            short_tmpdir(),
            *("--ray-address", local_ray.gcs, "--otlp-endpoint", rcv.endpoint, *metrics),
            env={**WATCH, **FAST_EXPORT},
        ) as sc,
    ):
        _joined(sc)
        wait_for(lambda: sc.status().ray_watch.snapshots >= 1, 60, what="first snapshot")
        assert sc.status().ray_watch.findings == []  # a healthy cluster: nothing
        made = time.time()
        group = placement_group([{"CPU": 1}] * 4, name="too-big")  # 4 CPUs on a 2-CPU cluster
        try:
            inc = sc.wait_incident(lambda r: r["rule"] == "placement_group", timeout_s=60)
            seen = time.time() - made
            print(f"\ninfeasible group: incident {seen:.2f} s after creation: {inc}")
            assert (inc["verdict"], inc["job_id"], inc["action"]) == ("HUNG", job, "observe")
            assert inc["evidence"]["ray"]["kind"] == "infeasible"
            assert inc["evidence"]["ray"]["name"] == "too-big"
            assert "ask CPU 4 together; the cluster has CPU 2" in inc["diagnosis"]["text"]
            assert inc["detection_latency_s"] < 10.0
            assert seen < 10.0

            table = ctl("status", "--target", sc.target)
            assert table.returncode == 0, table.stderr
            assert "RAY WATCHER:" in table.stdout and "1 finding\n" in table.stdout
            assert (
                f"placement_group job {job} incident {inc['id']} action observe: "
                "placement group too-big" in table.stdout
            )
            data = json.loads(ctl("status", "--target", sc.target, "--json").stdout)
            (finding,) = data["rayWatch"]["findings"]
            assert finding["incidentId"] == inc["id"] and finding["rule"] == "placement_group"

            text = ctl("diagnose", "--ray", "--target", sc.target)
            assert text.returncode == 0, text.stderr
            assert "no waits among" in text.stdout  # no task waits on another here
            dot = ctl("diagnose", "--ray", "--dot", "--target", sc.target)
            assert dot.returncode == 0 and dot.stdout.startswith("digraph ray_waits {")

            # OTel: the same incident span and verdict count as any incident.
            (span,) = wait_for(
                lambda: [s for s in rcv.spans() if s.name == "incident HUNG placement_group"],
                15,
                what="incident span",
            )
            a = span.attributes
            assert a["trainprobe.incident.id"] == inc["id"] and a["trainprobe.job_id"] == job
            assert a["trainprobe.evidence.ray.kind"] == "infeasible"
            assert span.status_code == 2  # ERROR
            fams = wait_for(
                lambda: (f := scrape(port)) and samples_of(f, "trainprobe_verdicts") and f,
                10,
                what="verdict count on the scrape",
            )
            (verdicts,) = samples_of(
                fams,
                "trainprobe_verdicts",
                trainprobe_verdict="HUNG",
                trainprobe_rule="placement_group",
            )
            assert verdicts.value == 1
        finally:
            remove_placement_group(group)
        time.sleep(3)  # three more snapshots: the removed group raises nothing new
        assert len(sc.incidents()) == 1


def test_diagnose_ray_without_a_ray_watcher_is_a_one_line_error() -> None:
    with SidecarProcess(short_tmpdir()) as sc:
        out = ctl("diagnose", "--ray", "--target", sc.target)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "FAILED_PRECONDITION: this sidecar runs no Ray watcher" in out.stderr
    assert ctl("diagnose", "--dot").returncode == 2  # --dot needs --ray


class Peer:
    def __init__(self) -> None:
        self.other: Any = None

    def meet(self, other: Any) -> None:
        self.other = other

    def pid(self) -> int:
        import os

        return os.getpid()

    def f(self) -> int:
        import ray

        return ray.get(self.other.g.remote())

    def g(self) -> int:
        import ray

        return ray.get(self.other.f.remote())


def test_kill_ends_both_actors_of_a_wait_cycle(local_ray: SimpleNamespace) -> None:
    ray = local_ray.ray
    env = {**WATCH, "TRAINPROBE_ON_RAY_FINDING": "kill"}
    with SidecarProcess(short_tmpdir(), "--ray-address", local_ray.gcs, env=env) as sc:
        _joined(sc)
        peer = ray.remote(num_cpus=0)(Peer)
        # One named actor (ended by ray.kill) and one unnamed (by its pid, as Ray Train's
        # controller would be).
        alpha, beta = peer.options(name="alpha").remote(), peer.remote()
        ray.get([alpha.meet.remote(beta), beta.meet.remote(alpha)])
        pids = ray.get([alpha.pid.remote(), beta.pid.remote()])
        try:
            start = time.time()
            stuck = alpha.f.remote()
            inc = sc.wait_incident(lambda r: r["rule"] == "wait_cycle", timeout_s=60)
            print(f"\nwait cycle: incident {time.time() - start:.2f} s after the first call")
            assert (inc["verdict"], inc["action"]) == ("HUNG", "kill")
            action = wait_for(lambda: sc.incidents("action"), 60, what="action record")[0]
            print(f"action: {action}")
            assert action["incident_id"] == inc["id"] and action["ok"] is True
            methods = sorted(o["method"] for o in action["outcomes"].values())
            assert methods == ["ray.kill", "signal"]
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(stuck, timeout=60)
            wait_for(lambda: not any(pid_running(p) for p in pids), 30, what="actors gone")
        finally:
            for a in (alpha, beta):
                with contextlib.suppress(Exception):
                    ray.kill(a)


def train_func(config: dict) -> None:  # never runs: the group never starts
    pass


def test_kill_ends_a_torch_trainer_that_can_never_start(local_ray: SimpleNamespace) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    ray = local_ray.ray
    env = {**WATCH, "TRAINPROBE_ON_RAY_FINDING": "kill"}
    trainer = TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=4, use_gpu=False),  # 4 CPUs, the cluster has 2
        run_config=RunConfig(name="too-big", storage_path=str(short_tmpdir("tpwatch-"))),
    )
    ended: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as err:
            ended.append(err)

    with SidecarProcess(short_tmpdir(), "--ray-address", local_ray.gcs, env=env) as sc:
        _joined(sc)
        start = time.time()
        thread = threading.Thread(target=fit, daemon=True)
        thread.start()
        inc = sc.wait_incident(lambda r: r["rule"] == "placement_group", timeout_s=60)
        assert inc["action"] == "kill" and inc["evidence"]["ray"]["kind"] == "infeasible"
        assert "a Ray Train worker group waits on it" in inc["diagnosis"]["text"]
        action = wait_for(lambda: sc.incidents("action"), 60, what="action record")[0]
        (outcome,) = action["outcomes"].values()
        assert outcome["class_name"] == "TrainController" and outcome["method"] == "signal"
        thread.join(60)
        took = time.time() - start
        print(f"\ninfeasible TorchTrainer: fit() ended {took:.1f} s after it began: {ended!r}")
        assert ended and isinstance(ended[0], ray.exceptions.RayActorError)
        # Before Ray Train's own 60 s start timeout would even have retried.
        assert took < 60.0
