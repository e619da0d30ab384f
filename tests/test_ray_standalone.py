"""A stand-alone sidecar (the real CLI process, as in a KubeRay pod) with
``--ray-address``: kills a hung Ray actor through Ray, and falls back to
signalling its pid when Ray cannot be reached. Real local Ray, real hang.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.ray_support import fresh_ray, pid_running
from tests.support import SidecarProcess, free_port, short_tmpdir, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]


class Hanger:
    """A Ray actor that trains a little, then hangs inside a step."""

    def __init__(self, target: str, job_id: str) -> None:
        import os

        from trainprobe.hooks import LivenessProbeHook

        self.pid = os.getpid()
        self.hook = LivenessProbeHook(target=target, job_id=job_id, rank=0, interval_ms=100)

    def ids(self) -> dict[str, Any]:
        return {"pid": self.pid, "actor_id": self.hook.identity.ray.actor_id}

    def handle_registered(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.hook.ray_handle.registered and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.hook.ray_handle.registered

    def run(self, steps: int) -> None:
        for i in range(1, steps + 1):
            self.hook.on_step_end(i)
            time.sleep(0.05)
        time.sleep(3600)  # the hang


@pytest.fixture(scope="module")
def local_ray() -> Iterator[SimpleNamespace]:
    with fresh_ray(num_cpus=2) as ray:
        yield SimpleNamespace(ray=ray, gcs=ray.get_runtime_context().gcs_address)


def _hang_one(ray: Any, sc: SidecarProcess, job_id: str) -> tuple[Any, dict[str, Any], Any]:
    actor = ray.remote(num_cpus=0)(Hanger).options(max_concurrency=2).remote(sc.target, job_id)
    ids = ray.get(actor.ids.remote())
    return actor, ids, actor.run.remote(steps=40)


def test_standalone_sidecar_kills_a_hung_actor_through_ray(local_ray: SimpleNamespace) -> None:
    ray = local_ray.ray
    flags = ["--ray-address", local_ray.gcs, "--stall-timeout-s", "2", "--kill-grace-s", "2"]
    flags += ["--hang-patience-s", "0"]  # the kill path through Ray, not the patience
    with SidecarProcess(short_tmpdir(), *flags) as sc:
        wait_for(lambda: "connected to Ray" in sc.log_text(), 60, what="sidecar joins Ray")
        actor, ids, run = _hang_one(ray, sc, "standalone")
        try:
            # The hook handed its handle to the registry the sidecar created.
            assert ray.get(actor.handle_registered.remote(30))
            inc = sc.wait_incident(lambda r: r["job_id"] == "standalone", timeout_s=60)
            assert (inc["rule"], inc["verdict"], inc["action"]) == ("stall", "HUNG", "kill")
            # At the 2 s threshold, not the 30 s default (the margin is for a loaded CI machine).
            assert 2.0 <= inc["detection_latency_s"] < 4.0
            action = wait_for(lambda: sc.incidents("action"), 30, what="action record")[0]
            out = action["outcomes"]["0"]
            assert action["ok"] is True
            assert out["method"] == "ray.kill" and out["actor_id"] == ids["actor_id"]
            assert out["no_restart"] is True
            assert out["pid"] == ids["pid"] and out["pid_gone"] is True
            assert out["actor_state"] == "DEAD" and out["death_cause"].startswith("RAY_KILL")
            assert "fallback" not in out
            assert not pid_running(ids["pid"])
            with pytest.raises(ray.exceptions.ActorDiedError):
                ray.get(run, timeout=30)
            # The Ray watcher ran all along (ray_watch is on by default): a healthy
            # cluster and a stalled rank are none of its business.
            assert sc.status().ray_watch.snapshots >= 1
            assert [r["rule"] for r in sc.incidents()] == ["stall"]
        finally:
            with contextlib.suppress(Exception):
                ray.kill(actor)


def test_unreachable_ray_falls_back_to_signalling_the_pid(local_ray: SimpleNamespace) -> None:
    ray = local_ray.ray
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    flags = ["--ray-address", closed, "--stall-timeout-s", "2", "--kill-grace-s", "2"]
    flags += ["--hang-patience-s", "0"]
    with SidecarProcess(short_tmpdir(), *flags, env={"TRAINPROBE_RAY_TIMEOUT_S": "2"}) as sc:
        actor, ids, run = _hang_one(ray, sc, "fallback")
        try:
            inc = sc.wait_incident(lambda r: r["job_id"] == "fallback", timeout_s=60)
            action = wait_for(lambda: sc.incidents("action"), 30, what="action record")[0]
            assert action["incident_id"] == inc["id"]
            out = action["outcomes"]["0"]
            assert out["fallback"] == "signal"
            assert "not reachable" in out["ray_error"] and closed in out["ray_error"]
            assert out["actor_id"] == ids["actor_id"]
            assert out["method"] == "signal" and out["signals"][:2] == ["SIGTERM", "SIGCONT"]
            assert out["exited"] is True and not pid_running(ids["pid"])
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(run, timeout=30)
        finally:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        assert "cannot kill actor" in sc.log_text()
    assert not Path(sc.socket).exists()


def test_cli_ray_per_node_places_one_sidecar_per_node_idempotently(
    local_ray: SimpleNamespace,
) -> None:
    import subprocess

    from tests.support import PYTHON, child_env
    from trainprobe.proto import RAY_NAMESPACE
    from trainprobe.sidecar.ray import list_sidecars, stop_sidecars
    from trainprobe.sidecar.ray.naming import is_job_actor_name, is_node_actor_name

    ray = local_ray.ray

    def ours() -> list[Any]:
        return [
            a
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == RAY_NAMESPACE and is_node_actor_name(a["name"])
        ]

    # The stand-alone sidecars above owned a registry actor each; it dies with them.
    # (Their jobs' coordinators are detached and outlive them by design: they
    # exit when idle, or with stop_sidecars() below.)
    wait_for(lambda: not ours(), 30, what="registries of stopped sidecars gone")
    state_dir = short_tmpdir()
    cmd = [PYTHON, "-m", "trainprobe.sidecar", "--ray-per-node"]
    cmd += ["--ray-address", local_ray.gcs, "--state-dir", str(state_dir)]
    try:
        first = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr
        assert "started on unix://" in first.stdout
        assert "running on 1 of 1 Ray node(s)" in first.stdout
        second = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=120)
        assert second.returncode == 0 and "already running" in second.stdout
        (info,) = list_sidecars()
        assert info.kind == "node-sidecar" and Path(info.socket.removeprefix("unix://")).exists()
    finally:
        stop_sidecars()
    assert not ours()
    leftover = ray.util.list_named_actors(all_namespaces=True)
    assert not [a for a in leftover if is_job_actor_name(a["name"])]  # coordinators too
