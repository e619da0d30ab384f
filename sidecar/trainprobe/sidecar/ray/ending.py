"""Ends Ray actors by id for ``on_ray_finding=kill/restart`` (blocking; run off the loop).

``ray.kill`` needs an actor *handle*, and Ray hands out handles by id only to
their owner (``CoreWorker::KillActor`` refuses an id it holds no handle for),
so there are two ways:

- a **named** actor: ``ray.get_actor(name, namespace)`` gives a handle, then
  ``ray.kill(handle, no_restart=...)`` through the GCS, on any node;
- an **unnamed** actor on *this* host (Ray Train's controller is unnamed):
  SIGKILL to its worker pid, after ``/proc/<pid>/cmdline`` shows that actor's
  Ray worker (``ray::<Class>...``), so a pid Ray reported stale is never a
  stranger's process.
  Ray then sees the actor die and restarts it only if it has ``max_restarts``
  left. An unnamed actor on another host is not ended (its record says why).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

__all__ = ["end_actors", "is_ray_worker"]

#: How long to watch an ended actor for Ray's DEAD state (only for the record).
SETTLE_S = 5.0


def is_ray_worker(pid: int, class_name: str = "") -> bool:
    """The kernel's word that ``pid`` is a Ray worker of actor class ``class_name``.

    Ray titles an actor's process ``ray::<Class>`` (``ray::<Class>.<method>``
    while it runs one), so a pid reused by another process, or by another
    actor's worker, does not match.
    """
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return title.startswith(f"ray::{class_name}".encode())


def _end_one(actor_id: str, no_restart: bool, address: str | None, timeout_s: int) -> dict:
    import ray
    from ray.util.state import get_actor

    row: Any = get_actor(actor_id, address=address, timeout=timeout_s)
    if row is None:
        return {"ok": False, "error": "Ray does not know this actor"}
    out: dict[str, object] = {
        "name": row.name or "",
        "class_name": row.class_name or "",
        "pid": int(row.pid or 0),
        "state_before": row.state,
    }
    if row.state == "DEAD":
        return {**out, "ok": True, "method": "none", "note": "already dead"}
    local = ray.get_runtime_context().get_node_id()
    if row.name:
        handle = ray.get_actor(row.name, namespace=getattr(row, "ray_namespace", None))
        ray.kill(handle, no_restart=no_restart)
        out.update(method="ray.kill", no_restart=no_restart)
    elif out["pid"] and row.node_id == local and is_ray_worker(int(row.pid), row.class_name or ""):
        os.kill(int(row.pid), signal.SIGKILL)
        out.update(method="signal", signal="SIGKILL")
    else:
        why = (
            "its pid is not a Ray worker here"
            if row.node_id == local
            else "it runs on another node"
        )
        return {**out, "ok": False, "error": f"unnamed actor and {why}: no way to end it from here"}
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            row = get_actor(actor_id, address=address, timeout=timeout_s) or row
        if row.state in ("DEAD", "RESTARTING"):
            break
        time.sleep(0.2)
    return {**out, "ok": True, "state_after": row.state}


def end_actors(
    actor_ids: list[str], no_restart: bool, address: str | None = None, timeout_s: int = 10
) -> dict[str, dict]:
    """End each actor; one outcome per id (``ok``, ``method``, ``error``...), never raises."""
    outcomes = {}
    for actor_id in actor_ids:
        try:
            outcomes[actor_id] = _end_one(actor_id, no_restart, address, timeout_s)
        except Exception as err:  # Ray busy or gone: the record says so, the next one is tried
            outcomes[actor_id] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
    return outcomes
