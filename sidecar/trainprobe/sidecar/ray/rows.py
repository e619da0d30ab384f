"""Ray State API and GCS rows -> the core's plain data (``core/ray/snapshot.py``).

Every field is read with a default: a row of another Ray version that lacks
one gives an empty value, never an exception that would lose the snapshot.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainprobe.sidecar.core.ray.snapshot import (
    ActorInfo,
    Bundle,
    NodeInfo,
    PlacementGroupInfo,
    TaskInfo,
    WaitRecord,
)

__all__ = ["actor_info", "node_info", "pg_info", "task_info", "wait_record", "with_strategy"]


def node_info(n: Any) -> NodeInfo:
    """A ``ray.nodes()`` entry; ``node:<ip>`` pseudo-resources are left out."""
    return NodeInfo(
        n["NodeID"],
        bool(n["Alive"]),
        {k: float(v) for k, v in n.get("Resources", {}).items() if not k.startswith("node:")},
        n.get("NodeManagerAddress", ""),
    )


def wait_record(rec: dict[str, Any]) -> WaitRecord:
    """A record of trainprobe's ``ray_wait`` wrapper, as stored in the internal KV."""
    return WaitRecord(
        rec["task_id"],
        rec.get("call_site", ""),
        "wrapper",
        tuple(rec.get("objects", ())),
        int(rec.get("pid", 0)),
        float(rec.get("since", 0)),
    )


def pg_info(p: Any) -> PlacementGroupInfo:
    stats = p.get("stats") or {}
    created_ns = int(stats.get("creation_request_received_ns") or 0)
    return PlacementGroupInfo(
        pg_id=p["placement_group_id"],
        name=p.get("name") or "",
        job_id=p.get("creator_job_id") or "",
        state=p.get("state") or "",
        scheduling_state=stats.get("scheduling_state") or "",
        attempts=int(stats.get("scheduling_attempt") or 0),
        bundles=tuple(
            Bundle(
                int((b.get("bundle_id") or {}).get("bundle_index", i)),
                {k: float(v) for k, v in (b.get("unit_resources") or {}).items()},
                b.get("node_id") or "",
            )
            for i, b in enumerate(p.get("bundles") or ())
        ),
        created_at=created_ns / 1e9,
    )


def with_strategy(p: PlacementGroupInfo, strategy: str) -> PlacementGroupInfo:
    return dataclasses.replace(p, strategy=strategy)


def actor_info(a: Any) -> ActorInfo:
    return ActorInfo(
        a["actor_id"],
        a.get("name") or "",
        a.get("class_name") or "",
        a.get("state") or "",
        int(a.get("pid") or 0),
        a.get("node_id") or "",
        a.get("job_id") or "",
        a.get("placement_group_id") or "",
    )


def task_info(t: Any) -> TaskInfo:
    return TaskInfo(
        t["task_id"],
        t.get("name") or "",
        t.get("state") or "",
        t.get("type") or "",
        t.get("job_id") or "",
        t.get("actor_id") or "",
        t.get("parent_task_id") or "",
        int(t.get("worker_pid") or 0),
        t.get("node_id") or "",
        t.get("placement_group_id") or "",
    )
