"""Ray integration pieces that run without a Ray cluster: the pure decisions,
naming, the connection probe, the handle store, and how a hook finds its
node's sidecar. The Ray calls themselves are tested against a real local Ray
in test_ray_train.py, test_ray_per_node.py and test_ray_standalone.py.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import PYTHON, child_env, free_port, short_tmpdir
from trainprobe.hooks import HandleRegistration, resolve_target
from trainprobe.proto import RAY_NAMESPACE, ray_node_actor_name, ray_node_socket_path
from trainprobe.sidecar import SettingsError, load_settings
from trainprobe.sidecar.core.incident import RecoveryWatch
from trainprobe.sidecar.core.ray import actor_summary, kill_settled, plan_ray_kill
from trainprobe.sidecar.core.session import HelloData, RayIds, ReportData, WorkerKey, WorkerState
from trainprobe.sidecar.core.session.fold import note_offset
from trainprobe.sidecar.ray import HandleStore, RayUnavailable, settings_for_node
from trainprobe.sidecar.ray.link import probe_address
from trainprobe.sidecar.ray.naming import is_node_actor_name, node_incident_log

NODE = "a1" * 28
ACTOR = "ffa6374939963a1313ec6fba01000000"

# -- pure decisions ------------------------------------------------------------


def test_kill_goes_through_ray_only_for_ray_actors_when_configured() -> None:
    actor = RayIds(job_id="01000000", node_id=NODE, actor_id=ACTOR)
    assert plan_ray_kill(actor, restart=False, ray_configured=True).route == "ray"
    assert plan_ray_kill(actor, restart=False, ray_configured=True).no_restart is True
    assert plan_ray_kill(actor, restart=True, ray_configured=True).no_restart is False
    assert plan_ray_kill(actor, restart=True, ray_configured=False).route == "signal"
    # An actor id from an unverified session is a claim: never aimed at with ray.kill.
    unverified = plan_ray_kill(actor, restart=False, ray_configured=True, verified=False)
    assert unverified.route == "signal" and "not verified" in unverified.reason
    driver = RayIds(job_id="01000000", node_id=NODE)  # a Ray driver, not an actor
    plan = plan_ray_kill(driver, restart=False, ray_configured=True)
    assert (plan.route, plan.reason) == ("signal", "worker is not a Ray actor")


# Shaped like `ray.util.state.get_actor(...)` after `ray.kill` (Ray 2.60).
KILLED = {
    "state": "DEAD",
    "pid": 20934,
    "death_cause": {
        "actor_died_error_context": {
            "error_message": "The actor is dead because it was killed by `ray.kill`.",
            "reason": "RAY_KILL",
            "pid": 20934,
        }
    },
}


def test_actor_summary_keeps_state_pid_and_one_line_death_cause() -> None:
    assert actor_summary(KILLED) == {
        "actor_state": "DEAD",
        "death_cause": "RAY_KILL: The actor is dead because it was killed by `ray.kill`.",
        "actor_pid": 20934,
    }
    assert actor_summary({"state": "ALIVE", "pid": 7, "death_cause": None}) == {
        "actor_state": "ALIVE",
        "death_cause": "",
        "actor_pid": 7,
    }
    assert actor_summary(None)["actor_state"] == "UNKNOWN"


def test_kill_settles_on_death_restart_or_a_new_process() -> None:
    assert kill_settled(actor_summary(KILLED), old_pid=20934)
    assert kill_settled({"actor_state": "RESTARTING", "actor_pid": 0}, old_pid=5)
    assert kill_settled({"actor_state": "ALIVE", "actor_pid": 6}, old_pid=5)
    assert not kill_settled({"actor_state": "ALIVE", "actor_pid": 5}, old_pid=5)
    assert not kill_settled(actor_summary(None), old_pid=5)


def _state(pid: int, first_seen_at: float) -> WorkerState:
    hello = HelloData(1, "0.1.0", "job", 1, 1, 2, "host", pid)
    state = WorkerState(hello=hello, first_seen_at=first_seen_at)
    note_offset(state, 0.0)  # worker clock == sidecar clock
    return state


def _report(steps: list[int], ends_s: list[float]) -> ReportData:
    return ReportData(
        seq=1,
        mono_ns=int(max(ends_s, default=0) * 1e9),
        wall_ns=0,
        has_step=bool(steps),
        last_step=steps[-1] if steps else 0,
        last_step_mono_ns=int(ends_s[-1] * 1e9) if ends_s else 0,
        total_steps=len(steps),
        recent_steps=tuple(steps),
        recent_step_end_mono_ns=tuple(int(t * 1e9) for t in ends_s),
    )


def test_recovery_is_reported_once_on_the_replacements_first_step() -> None:
    watch = RecoveryWatch()
    key = WorkerKey("job", 1)
    watch.expect("inc-1", key, old_pid=100, killed_at=50.0, method="ray.kill")
    # Reports of the killed process itself, or without steps, do not count.
    assert watch.on_report(_state(100, 10.0), _report([13], [49.0]), now=51.0) is None
    new = _state(200, first_seen_at=70.0)
    assert watch.on_report(new, _report([], []), now=70.1) is None
    record = watch.on_report(new, _report([12, 11], [71.5, 71.0]), now=72.0)
    assert record == {
        "type": "recovery",
        "incident_id": "inc-1",
        "job_id": "job",
        "rank": 1,
        "method": "ray.kill",
        "old_pid": 100,
        "new_pid": 200,
        "first_step": 11,
        "reconnected_after_s": 20.0,
        "resumed_after_s": 21.0,
    }
    assert len(watch) == 0
    assert watch.on_report(new, _report([13], [72.0]), now=72.5) is None


def test_recovery_expectations_expire() -> None:
    watch = RecoveryWatch(expire_s=60.0)
    watch.expect("inc-1", WorkerKey("job", 1), 100, killed_at=0.0, method="signal")
    assert watch.on_report(_state(200, 61.0), _report([1], [61.0]), now=61.0) is None
    assert len(watch) == 0


# -- naming and per-node settings ----------------------------------------------


def test_each_node_gets_its_own_socket_actor_name_and_incident_log() -> None:
    settings = load_settings(env={}, cli={"state_dir": "/var/lib/tp", "ray_address": "auto"})
    node = settings_for_node(settings, NODE)
    assert node.listen == (f"unix://{ray_node_socket_path(NODE)}",)
    assert node.incident_log_path == Path(f"/var/lib/tp/incidents-{NODE[:12]}.jsonl")
    assert node.ray_address is None and not node.ray_per_node
    assert node_incident_log(Path("/x/log.jsonl"), "b2" * 28) == Path("/x/log-b2b2b2b2b2b2.jsonl")
    assert RAY_NAMESPACE == "trainprobe"
    assert is_node_actor_name(ray_node_actor_name(NODE))
    assert not is_node_actor_name(ray_node_actor_name(""))


def test_ray_timeout_setting_is_checked() -> None:
    assert load_settings(env={"TRAINPROBE_RAY_TIMEOUT_S": "2.5"}).ray_timeout_s == 2.5
    with pytest.raises(SettingsError, match=r"ray_timeout_s.*0\.1\.\.600"):
        load_settings(env={}, cli={"ray_timeout_s": "0"})


# -- adapters that need no cluster ---------------------------------------------


def test_probe_fails_fast_on_a_closed_port_and_passes_a_listening_one() -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(RayUnavailable, match=f"127.0.0.1:{port} is not reachable"):
        probe_address(f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 1.5
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        probe_address(f"127.0.0.1:{srv.getsockname()[1]}")
    probe_address("auto")  # left to ray.init


def test_handle_store_is_bounded_and_forgets_the_oldest() -> None:
    store = HandleStore(max_entries=2)
    store.put("a", "ha", 1)
    store.put("b", "hb", 2)
    store.put("a", "ha2", 3)  # re-registering refreshes
    store.put("c", "hc", 4)
    assert (store.get("a"), store.get("b"), store.get("c")) == ("ha2", None, "hc")
    assert store.pids() == {"a": 3, "c": 4}
    store.pop("a")
    assert len(store) == 1


def test_handle_registration_without_ray_fails_quietly() -> None:
    reg = HandleRegistration(NODE, ACTOR, pid=1)
    assert reg.register_once() is False
    assert reg.last_error and not reg.registered


def test_a_hook_under_ray_prefers_its_node_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    run = short_tmpdir()
    monkeypatch.setenv("TRAINPROBE_RUNTIME_DIR", str(run))
    monkeypatch.delenv("TRAINPROBE_TARGET", raising=False)
    node_sock = ray_node_socket_path(NODE)
    # Neither socket exists yet: the node's (its sidecar may start later).
    assert resolve_target(None, NODE) == f"unix://{node_sock}"
    assert resolve_target(None, "") == f"unix://{run / 'sidecar.sock'}"
    with socket.socket(socket.AF_UNIX) as default:
        default.bind(str(run / "sidecar.sock"))
        # Only a stand-alone sidecar on the default socket: use it.
        assert resolve_target(None, NODE) == f"unix://{run / 'sidecar.sock'}"
        with socket.socket(socket.AF_UNIX) as node:
            node.bind(str(node_sock))
            assert resolve_target(None, NODE) == f"unix://{node_sock}"
    monkeypatch.setenv("TRAINPROBE_TARGET", "unix:///explicit.sock")
    assert resolve_target(None, NODE) == "unix:///explicit.sock"


def test_nothing_imports_ray_until_it_is_used() -> None:
    code = (
        "import sys\n"
        "import trainprobe.hooks, trainprobe.sidecar, trainprobe.sidecar.ray\n"
        "from trainprobe.sidecar import Sidecar, load_settings\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_without_ray_installed_a_ray_link_reports_it_instead_of_failing() -> None:
    # The GPU machines have no Ray: stand in for that by blocking the import.
    code = (
        "import sys, socket\n"
        "sys.modules['ray'] = None\n"
        "from trainprobe.sidecar.ray import RayLink, RayUnavailable\n"
        "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
        "link = RayLink(f'127.0.0.1:{srv.getsockname()[1]}', timeout_s=1.0)\n"
        "try:\n"
        "    link.wait_ready(5.0)\n"
        "except RayUnavailable as err:\n"
        "    print('unavailable:', err)\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("unavailable:") and "ray is not installed" in out.stdout
