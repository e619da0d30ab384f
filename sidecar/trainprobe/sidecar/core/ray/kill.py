"""Decisions for killing a worker through Ray, as plain functions.

The Ray adapter (``trainprobe.sidecar.ray``) asks :func:`plan_ray_kill` which
route to take, reads the actor's state through Ray's State API, and lets
:func:`actor_summary` and :func:`kill_settled` say what that state means.

Semantics of the two destructive actions for a worker that is a Ray actor:

- ``kill``: ``ray.kill(actor, no_restart=True)``. The actor stays dead. Ray
  Train still sees a failed worker and, if ``FailureConfig(max_failures)``
  allows, restarts the worker group from the latest checkpoint.
- ``restart``: ``ray.kill(actor, no_restart=False)``. An actor created with
  ``max_restarts`` is brought back by Ray itself; Ray Train workers have
  none, so Ray Train restarts the whole group from the latest checkpoint,
  using one of ``FailureConfig(max_failures)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainprobe.sidecar.core.session.model import RayIds

#: Actor states (Ray State API) after which a kill has taken effect.
SETTLED_STATES = frozenset({"DEAD", "RESTARTING"})


@dataclass(frozen=True)
class RayKillPlan:
    """How to kill one worker: ``route`` is ``"ray"`` or ``"signal"``."""

    route: str
    actor_id: str = ""
    no_restart: bool = True
    reason: str = ""


def plan_ray_kill(
    ray: RayIds, restart: bool, ray_configured: bool, verified: bool = True
) -> RayKillPlan:
    """Go through Ray when the worker is a Ray actor, Ray is configured, and the
    session's pid was verified by the kernel.

    The actor id is the client's word: an unverified session naming another
    worker's actor would otherwise aim ``ray.kill`` at it. Such a session gets
    the fallback (which asks an unverified worker to abort over its own stream).
    """
    if not ray_configured:
        return RayKillPlan("signal", reason="no ray_address configured")
    if not ray.actor_id:
        return RayKillPlan("signal", reason="worker is not a Ray actor")
    if not verified:
        return RayKillPlan("signal", reason="session not verified: its actor id is not trusted")
    return RayKillPlan("ray", actor_id=ray.actor_id, no_restart=not restart)


def _death_cause(cause: Any) -> str:
    """One line out of the State API's ``death_cause`` (a dict of one context)."""
    if not isinstance(cause, Mapping) or not cause:
        return ""
    for context in cause.values():
        if isinstance(context, Mapping):
            reason = str(context.get("reason", "") or "")
            message = str(context.get("error_message", "") or "").strip()
            return f"{reason}: {message}" if reason and message else reason or message
    return str(cause)


def actor_summary(actor: Mapping[str, Any] | None) -> dict[str, object]:
    """The fields an action record keeps from one State API actor entry."""
    if actor is None:
        return {"actor_state": "UNKNOWN", "death_cause": "", "actor_pid": 0}
    return {
        "actor_state": str(actor.get("state", "") or "UNKNOWN"),
        "death_cause": _death_cause(actor.get("death_cause")),
        "actor_pid": int(actor.get("pid") or 0),
    }


def kill_settled(summary: Mapping[str, object], old_pid: int) -> bool:
    """Whether the actor's state shows the kill took effect.

    DEAD or RESTARTING, or ALIVE again in another process (Ray restarted it).
    """
    state = summary.get("actor_state")
    if state in SETTLED_STATES:
        return True
    return state == "ALIVE" and summary.get("actor_pid") not in (0, old_pid)
