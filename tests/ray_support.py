"""Helpers for the tests that start a real local Ray.

Ray worker processes inherit the environment of the raylet, which inherits
the driver's at ``ray.init``: :func:`ray_environment` puts this checkout (and
``examples/``) on PYTHONPATH there, and gives every Ray test its own short
``TRAINPROBE_RUNTIME_DIR``, so that the per-node sockets of concurrent test
runs never meet.

Token authentication: Ray 2.60 turns it on by default for a local cluster
and keeps the token in ``~/.ray/auth_token``. We set ``RAY_AUTH_MODE=token``
and a fresh ``RAY_AUTH_TOKEN`` (one per test process) explicitly, so the tests always exercise the
authenticated path (also where a developer disabled it) and never read or
write the home directory's token.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.support import REPO, free_port, read_jsonl, short_tmpdir

EXAMPLES = REPO / "examples"
#: The tests' fault harness (ddp_worker.py), imported by Ray actors.
WORKERS = REPO / "tests" / "workers"
#: One token for every cluster this test process starts: Ray's client caches
#: the token it first read for the life of the process.
RAY_TEST_TOKEN = secrets.token_hex(32)


@contextlib.contextmanager
def ray_environment() -> Iterator[Path]:
    """Set the environment a Ray test needs; restore it afterwards. Yields a work dir."""
    saved = dict(os.environ)
    workdir = short_tmpdir("tpray-")
    roots = [str(REPO / d) for d in ("proto", "hooks", "sidecar")] + [str(EXAMPLES), str(WORKERS)]
    os.environ["PYTHONPATH"] = os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = RAY_TEST_TOKEN
    os.environ["TRAINPROBE_RUNTIME_DIR"] = str(workdir / "run")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["RAY_DEDUP_LOGS"] = "0"
    try:
        yield workdir
    finally:
        os.environ.clear()
        os.environ.update(saved)


def import_as_ray_workers_do(name: str) -> Any:
    """Import module ``name`` of examples/ or tests/workers/ by the top-level name
    Ray's workers know it by, so that its functions are pickled by reference."""
    for d in (str(EXAMPLES), str(WORKERS)):
        if d not in sys.path:
            sys.path.append(d)  # last: never shadows what the tests import
    return importlib.import_module(name)


def init_local_ray(num_cpus: int = 2) -> Any:
    """``ray.init`` a fresh local cluster (with the dashboard: the State API needs it)."""
    import ray

    ray.init(
        # "local": a new cluster even when /tmp/ray/ray_current_cluster names another
        # engineer's (address=None would join it on a shared machine).
        address="local",
        num_cpus=num_cpus,
        include_dashboard=True,
        dashboard_port=free_port(),
        log_to_driver=False,
    )
    return ray


@contextlib.contextmanager
def fresh_ray(num_cpus: int = 2) -> Iterator[Any]:
    """A fresh local Ray in :func:`ray_environment`, shut down on the way out. Yields ``ray``."""
    with ray_environment():
        ray = init_local_ray(num_cpus=num_cpus)
        try:
            yield ray
        finally:
            ray.shutdown()


@contextlib.contextmanager
def ray_cluster(nodes: int) -> Iterator[tuple[Any, Path]]:
    """A real Ray of ``nodes`` nodes on this machine (``ray.cluster_utils.Cluster``,
    one CPU each; more can be added), the driver connected. Yields (cluster,
    work dir); on the way out, trainprobe's node sidecars and coordinators are
    stopped before the cluster."""
    with ray_environment() as workdir:
        import ray
        from ray.cluster_utils import Cluster

        c = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "dashboard_port": free_port()},
        )
        try:
            for _ in range(nodes - 1):
                c.add_node(num_cpus=1)
            c.wait_for_nodes()
            ray.init(address=c.address, log_to_driver=False)
            yield c, workdir
        finally:
            from trainprobe.sidecar.ray import stop_sidecars
            from trainprobe.sidecar.ray.coordinator import stop_coordinators

            with contextlib.suppress(Exception):
                stop_sidecars()
            with contextlib.suppress(Exception):
                stop_coordinators()
            ray.shutdown()
            c.shutdown()


@contextlib.contextmanager
def ray_node_with_sidecar(cli: dict[str, str], num_cpus: int = 2) -> Iterator[SimpleNamespace]:
    """A fresh local Ray with trainprobe's per-node sidecar on ``cli``'s settings
    (shipped defaults for the rest; its state in the work dir). Yields ``ray``,
    ``workdir`` and ``sidecar`` (the placement: ``socket``, ``incident_log``...)."""
    with ray_environment() as workdir:
        ray = init_local_ray(num_cpus=num_cpus)
        from trainprobe.sidecar import load_settings
        from trainprobe.sidecar.ray import start_sidecars, stop_sidecars

        try:
            cli = {**cli, "state_dir": str(workdir / "state")}
            (placed,) = start_sidecars(load_settings(env={}, cli=cli))
            assert placed.error == "" and placed.kind == "node-sidecar"
            yield SimpleNamespace(ray=ray, workdir=workdir, sidecar=placed)
        finally:
            with contextlib.suppress(Exception):
                stop_sidecars()
            ray.shutdown()


#: The node sidecar of Ray Train's restart path (tests/test_ray_train.py,
#: bench/bench_ray_startup.py): a 3 s stall kills at once, and the start-up
#: patience is seconds, not the shipped 600 s, where only the path matters.
RAY_TRAIN_STARTUP_S = 10.0
RAY_TRAIN_SIDECAR = {
    "stall_timeout_s": "3.0",
    "hang_patience_s": "0",
    "on_hung": "restart",
    "kill_grace_s": "2",
    # Ray Train ends the peers of a killed culprit itself; our sweep of what is
    # left must not race it on a busy machine.
    "job_kill_grace_s": "30",
    "startup_timeout_s": str(RAY_TRAIN_STARTUP_S),
}


def start_up_hang_trainer(
    node: SimpleNamespace,
    name: str,
    progress: Path,
    steps: int = 25,
    hang_at: int = 13,
    ckpt_every: int = 5,
) -> Any:
    """examples/ray_train_job.py (``watch_ddp``, a checkpoint every ``ckpt_every``) whose
    rank 1 sleeps in step ``hang_at``; in the group Ray Train restarts from the
    checkpoint before it, rank 1 sleeps after making its hook, before its first
    step (once), while rank 0 waits in that step's allreduce; ``max_failures=2``
    lets a third group finish. ``node`` is :func:`ray_node_with_sidecar`'s with
    :data:`RAY_TRAIN_SIDECAR`, and ``node.job`` the example module."""
    config = {
        "steps": steps,
        "ckpt_every": ckpt_every,
        "hang_rank": 1,
        "hang_at": hang_at,
        "progress": str(progress),
        "watch_ddp": True,
        "start_hang": str(node.workdir / f"{name}.start_hang"),
    }
    storage = str(node.workdir / "storage")
    return node.job.make_trainer(config, storage_path=storage, name=name, max_failures=2)


def job_records(node: SimpleNamespace, job_id: str) -> list[dict[str, Any]]:
    """The sidecar's incident log lines about ``job_id``."""
    return [r for r in read_jsonl(Path(node.sidecar.incident_log)) if r.get("job_id") == job_id]


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def kill_leftovers(pids: list[int]) -> None:
    """SIGKILL processes a failed test may have left running."""
    for pid in pids:
        if pid_running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_up_hang_caught(
    node: SimpleNamespace, job_id: str, events: list[dict[str, Any]], patience_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rank 1 of a restarted Ray Train group slept after making its hook, before
    its first step (event ``start_hang``: ray_train_job's ``hang_at_start``),
    while rank 0 waited in that step's first collective (the plain loop's
    gradient allreduce, Lightning's broadcast, the HF Trainer's gather). The
    sidecar named it by rule ``startup_straggler`` with rank 0 waiting, within
    the start-up patience (``patience_s``; not by rule ``startup`` at its end),
    and killed it alone, through Ray. Returns (the ``start_hang`` event, the
    incident)."""
    (stuck,) = [e for e in events if e["event"] == "start_hang"]
    assert stuck["rank"] == 1, stuck
    records = job_records(node, job_id)
    (inc,) = [r for r in records if r["type"] == "incident" and r["time"] > stuck["t"]]
    assert inc["rule"] == "startup_straggler", inc
    d = inc["diagnosis"]
    assert d["culprits"] == [1] and d["waiting"] == [0], d
    assert inc["targets"] == [1] and inc["detection_latency_s"] < patience_s, inc
    assert inc["time"] - stuck["t"] < patience_s, inc
    (action,) = [
        r
        for r in records
        if r["type"] == "action" and r["incident_id"] == inc["id"] and "phase" not in r
    ]
    assert list(action["outcomes"]) == ["1"], action
    out = action["outcomes"]["1"]
    assert out["method"] == "ray.kill" and out["pid"] == stuck["pid"] and out["pid_gone"], out
    assert not pid_running(stuck["pid"])
    print(f"\nstart-up hang -> named {inc['time'] - stuck['t']:.1f} s")
    return stuck, inc
