"""A Ray watcher finding as an :class:`Incident`, and what ``on_ray_finding`` does with it.

A finding becomes an ordinary incident (verdict HUNG, rule ``placement_group``
or ``wait_cycle``, job id = the Ray job), so that the incident log, the spans
and the metrics treat it like every other one. It has no ranks: Ray's
tasks and actors are not trainprobe workers; the finding itself is the
evidence (under the key ``"ray"``) and its text the diagnosis.

Which actors a destructive action ends:

- ``wait_cycle``: the actors whose methods wait in the cycle. Ending one
  breaks the cycle; all are ended because each waits on the others and
  none can finish. Plain tasks in a cycle are not ended (Ray cancels a task
  only through its ObjectRef, which the sidecar does not hold); they fail
  once the actor they wait on is gone.
- ``placement_group``: only an *infeasible* group (it can never start with
  the cluster as it is): the job's Ray Train controller and the actors waiting
  to be placed in it, so that the driver fails now instead of waiting forever.
  A group that is merely *stuck* (it fits, but others hold the resources) is
  never acted on: the holder may finish, and ending the waiter would kill a
  healthy queued job.
"""

from __future__ import annotations

from trainprobe.sidecar.core.incident.actions import Action, is_destructive
from trainprobe.sidecar.core.incident.incidents import Incident, next_incident_id
from trainprobe.sidecar.core.incident.policy import KillBudget
from trainprobe.sidecar.core.ray.snapshot import RayFinding
from trainprobe.sidecar.core.session.model import Verdict

#: The actions ``on_ray_finding`` accepts (``dump`` has no meaning for Ray's processes).
RAY_FINDING_ACTIONS: tuple[str, ...] = (
    Action.OBSERVE.value,
    Action.KILL.value,
    Action.RESTART.value,
)


def ray_incident(finding: RayFinding, now: float, wall_now: float) -> Incident:
    """The incident of ``finding``; ``now`` on the sidecar's clock, ``wall_now`` Unix s.

    The onset is when the trouble began: a pending group's creation, or the
    snapshot that found the cycle (it was first seen one interval earlier).
    """
    ev = finding.evidence
    waited = ev.get("pending_s", 0.0)
    age = max(0.0, wall_now - finding.at) + (
        float(waited) if isinstance(waited, int | float) else 0
    )
    edges = ev.get("edges", [])
    pids = (
        sorted(
            {
                int(e["waiter_pid"])
                for e in edges
                if isinstance(e, dict) and isinstance(e.get("waiter_pid"), int) and e["waiter_pid"]
            }
        )
        if isinstance(edges, list)
        else []
    )
    return Incident(
        id=next_incident_id(),
        time=wall_now,
        detected_at=now,
        job_id=finding.job_id,
        rule=finding.rule,
        verdict=Verdict.HUNG,
        ranks=[],
        pids=pids,
        hosts=[],
        evidence={"ray": {"key": finding.key, **ev}},
        onset_at=now - age,
        diagnosis={"text": finding.text},
    )


def ray_targets(finding: RayFinding) -> list[str]:
    """The actor ids a destructive action ends (see the module doc); [] for none."""
    ev = finding.evidence
    if finding.rule == "wait_cycle":
        edges = ev.get("edges", [])
        ids = {
            str(e.get("waiter_actor_id") or "")
            for e in (edges if isinstance(edges, list) else [])
            if isinstance(e, dict)
        }
        return sorted(i for i in ids if i)
    if finding.rule == "placement_group" and ev.get("kind") == "infeasible":
        waiting = ev.get("waiter_actor_ids", [])
        return sorted(str(i) for i in waiting if i) if isinstance(waiting, list) else []
    return []


def decide_ray(
    incident: Incident,
    finding: RayFinding,
    setting: str,
    dry_run: bool,
    budget: KillBudget,
    now: float,
) -> list[str]:
    """Set the incident's action, reason and dry run in place; return the actors to end."""
    action = Action(setting)
    reason = f"on_ray_finding={action}"
    targets: list[str] = []
    if is_destructive(action):
        targets = ray_targets(finding)
        if not targets:
            why = (
                "a stuck group fits the cluster and may still start"
                if finding.rule == "placement_group"
                else "no actor in it (plain tasks cannot be ended by id)"
            )
            reason, action = f"{reason}, but {why}: observing only", Action.OBSERVE
        elif not budget.spend(incident.job_id, now):
            reason = (
                f"{reason}, but job {incident.job_id!r} used its {budget.limit} kills this hour "
                "(max_kills_per_hour): observing only"
            )
            action, targets = Action.OBSERVE, []
    incident.action = action
    incident.action_reason = reason
    incident.dry_run = dry_run
    return targets
