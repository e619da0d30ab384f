"""Rule ``placement_group``: a placement group that can never start, or keeps failing to.

Ray itself says little here: it suppresses infeasible warnings for
placement-group resources (ray#22235), never raises on an infeasible group
(ray#20043), and marks ``scheduling_state == INFEASIBLE`` only when one bundle
fits no node. A PACK group of 4 one-CPU bundles on a 2-CPU cluster is
``NO_RESOURCES`` forever (seen on Ray 2.60), and Ray Train's controller waits
60 s (``RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S``) before it gives up and tries
again, indefinitely.

Two findings, each once per group while it stays pending:

- **infeasible**: the group is PENDING/RESCHEDULING and the nodes' *total*
  resources rule it out, whatever the others free: a bundle that fits no
  node, bundles that together ask more than the cluster has, a STRICT_PACK
  sum that fits no node, a STRICT_SPREAD group with more bundles than nodes
  that can hold one. Every test is a necessary condition, so a report is
  never wrong about the cluster as it is (an autoscaler may still add nodes;
  the text says what the cluster has now). Reported on the first snapshot.
- **stuck**: pending longer than ``pending_limit_s`` while Ray's scheduling
  attempts rise, i.e. Ray keeps trying and failing. The default limit, 60 s,
  is Ray Train's own worker-group start timeout: a group that fits but waits
  for resources held by others is normal for that long (a queue of jobs),
  and no finding before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trainprobe.sidecar.core.ray.snapshot import (
    NodeInfo,
    PlacementGroupInfo,
    RayFinding,
    RaySnapshot,
    fmt_resources,
)

RULE = "placement_group"
WAITING_STATES = frozenset({"PENDING", "RESCHEDULING"})
#: Actor classes that mean "a Ray Train worker group waits on this group".
TRAIN_CONTROLLERS = frozenset({"TrainController"})  # Ray Train v2 (default since 2.5x)
TRAIN_WORKERS = frozenset({"RayTrainWorker"})  # Ray Train v1 workers, pending on the group
_EPS = 1e-9


@dataclass(frozen=True)
class PlacementLimits:
    pending_limit_s: float = 60.0


@dataclass
class _Seen:
    first_seen: float
    first_attempts: int
    attempts: int


@dataclass
class PlacementHistory:
    """What earlier snapshots showed: when each waiting group was first seen, what was reported."""

    seen: dict[str, _Seen] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)


def _fits(ask: dict[str, float], have: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + _EPS >= v for k, v in ask.items() if v > 0)


def _closest(ask: dict[str, float], nodes: list[NodeInfo]) -> NodeInfo:
    """The node that comes nearest to holding ``ask``: most resources met, then most of each."""

    def score(node: NodeInfo) -> tuple[int, float]:
        met = sum(node.total.get(k, 0.0) + _EPS >= v for k, v in ask.items())
        share = sum(min(node.total.get(k, 0.0) / v, 1.0) for k, v in ask.items() if v > 0)
        return met, share

    return max(nodes, key=score)


def _total(resources: Iterable[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in resources:
        for k, v in r.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _nodes_text(nodes: list[NodeInfo]) -> str:
    return f"{len(nodes)} node" + ("s" if len(nodes) != 1 else "")


def infeasible_reasons(pg: PlacementGroupInfo, nodes: Iterable[NodeInfo]) -> list[str]:
    """Why ``pg`` can never be placed on these nodes; empty if it might be."""
    alive = [n for n in nodes if n.alive]
    if not alive:
        return ["the cluster has no alive node"]
    reasons = []
    for b in pg.bundles:
        if not any(_fits(b.resources, n.total) for n in alive):
            near = _closest(b.resources, alive)
            have = {k: near.total.get(k, 0.0) for k in b.resources}
            reasons.append(
                f"bundle {b.index} asks {fmt_resources(b.resources)}; "
                f"the largest node has {fmt_resources(have)}"
            )
    if reasons:
        return reasons
    asked = _total(b.resources for b in pg.bundles)
    cluster = _total(n.total for n in alive)
    short = {k: v for k, v in asked.items() if cluster.get(k, 0.0) + _EPS < v}
    if short:
        has = {k: cluster.get(k, 0.0) for k in short}
        return [
            f"its {len(pg.bundles)} bundles ask {fmt_resources(short)} together; "
            f"the cluster has {fmt_resources(has)} on {_nodes_text(alive)}"
        ]
    if pg.strategy == "STRICT_PACK" and not any(_fits(asked, n.total) for n in alive):
        near = _closest(asked, alive)
        have = {k: near.total.get(k, 0.0) for k in asked}
        return [
            f"STRICT_PACK needs {fmt_resources(asked)} on one node; "
            f"the largest node has {fmt_resources(have)}"
        ]
    if pg.strategy == "STRICT_SPREAD":
        able = [n for n in alive if any(_fits(b.resources, n.total) for b in pg.bundles)]
        if len(able) < len(pg.bundles):
            return [
                f"STRICT_SPREAD needs {len(pg.bundles)} nodes; "
                f"{len(able)} of the cluster's {_nodes_text(alive)} can hold a bundle"
            ]
    return []


def waiters(pg: PlacementGroupInfo, snap: RaySnapshot) -> list[str]:
    """Who waits on ``pg``: a Ray Train controller of its job, actors and tasks placed in it."""
    out = []
    for a in snap.actors:
        if a.class_name in TRAIN_CONTROLLERS and a.state == "ALIVE" and a.job_id == pg.job_id:
            out.append(
                f"a Ray Train worker group waits on it (controller {a.class_name}, pid {a.pid}; "
                "Ray Train gives up after RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S, 60 s by "
                "default, and tries again)"
            )
    pending = [a for a in snap.actors if a.placement_group_id == pg.pg_id and a.state != "ALIVE"]
    if any(a.class_name in TRAIN_WORKERS for a in pending):
        out.append("a Ray Train worker group waits on it")
    if pending:
        names = sorted({a.name or a.class_name for a in pending})
        out.append(f"{len(pending)} actors wait on it ({', '.join(names[:5])})")
    tasks = [t for t in snap.tasks if t.placement_group_id == pg.pg_id and not t.done]
    if tasks:
        out.append(
            f"{len(tasks)} tasks wait on it ({', '.join(sorted({t.name for t in tasks})[:5])})"
        )
    return out


def waiter_actor_ids(pg: PlacementGroupInfo, snap: RaySnapshot) -> list[str]:
    """The actors ``on_ray_finding=kill`` ends for ``pg``: the job's Ray Train
    controller, and actors that wait to be placed in the group."""
    return sorted(
        {
            a.actor_id
            for a in snap.actors
            if (a.class_name in TRAIN_CONTROLLERS and a.state == "ALIVE" and a.job_id == pg.job_id)
            or (a.placement_group_id == pg.pg_id and a.state != "ALIVE")
        }
    )


def _holders(pg: PlacementGroupInfo, snap: RaySnapshot) -> list[str]:
    """The created groups that hold resources this one asks for (the biggest first)."""
    asked = set(_total(b.resources for b in pg.bundles))
    held = []
    for other in snap.pgs:
        if other.state != "CREATED" or other.pg_id == pg.pg_id:
            continue
        res = {k: v for k, v in _total(b.resources for b in other.bundles).items() if k in asked}
        if res:
            held.append(
                (
                    -sum(res.values()),
                    f"{other.name or other.pg_id[:12]} of job {other.job_id} "
                    f"({fmt_resources(res)})",
                )
            )
    return [text for _, text in sorted(held)[:3]]


def judge_placement(
    snap: RaySnapshot, history: PlacementHistory, now: float, limits: PlacementLimits
) -> list[RayFinding]:
    """Findings for groups that can never start or keep failing to; updates ``history``."""
    findings = []
    waiting = {pg.pg_id: pg for pg in snap.pgs if pg.state in WAITING_STATES}
    for gone in set(history.seen) - set(waiting):  # started or removed: judged afresh if it returns
        del history.seen[gone]
        history.reported.discard(gone)
    for pg in waiting.values():
        seen = history.seen.setdefault(pg.pg_id, _Seen(now, pg.attempts, pg.attempts))
        seen.attempts = pg.attempts
        if pg.pg_id in history.reported:
            continue
        # Ray's creation time says how long a PENDING group has waited even
        # when the watcher started late; a RESCHEDULING one waits since we saw it so.
        since = pg.created_at if pg.state == "PENDING" and pg.created_at > 0 else seen.first_seen
        age = max(0.0, now - since)
        label = f"placement group {pg.name or pg.pg_id[:12]} of job {pg.job_id}"
        evidence: dict[str, object] = {
            "placement_group_id": pg.pg_id,
            "name": pg.name,
            "state": pg.state,
            "scheduling_state": pg.scheduling_state,
            "strategy": pg.strategy,
            "attempts": pg.attempts,
            "pending_s": round(age, 3),
            "bundles": [b.resources for b in pg.bundles],
            "nodes": {n.node_id[:12]: n.total for n in snap.nodes if n.alive},
        }
        reasons = infeasible_reasons(pg, snap.nodes)
        if reasons:
            kind, text = "infeasible", f"{label} can never be placed: " + "; ".join(reasons)
        elif age >= limits.pending_limit_s and pg.attempts > seen.first_attempts:
            kind = "stuck"
            text = (
                f"{label} is {pg.state} for {age:.0f} s (limit {limits.pending_limit_s:g} s), "
                f"scheduling attempts {seen.first_attempts} -> {pg.attempts} "
                f"({pg.scheduling_state or 'no state'}); "
                "it fits the cluster but cannot get its resources"
            )
            holders = _holders(pg, snap)
            if holders:
                text += "; held by " + ", ".join(holders)
                evidence["held_by"] = holders
        else:
            continue
        who = waiters(pg, snap)
        if who:
            text += "; " + "; ".join(who)
        evidence.update(
            kind=kind, reasons=reasons, waiters=who, waiter_actor_ids=waiter_actor_ids(pg, snap)
        )
        history.reported.add(pg.pg_id)
        findings.append(RayFinding(RULE, f"pg:{pg.pg_id}", pg.job_id, text, now, evidence))
    return findings
