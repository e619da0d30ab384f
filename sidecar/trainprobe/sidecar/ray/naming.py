"""Names, namespace and per-node settings of trainprobe's Ray actors.

One place for them, so that other Ray actors (a job-level coordinator, say)
can be added next to the per-node sidecars without guessing conventions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

from trainprobe.proto import RAY_NAMESPACE, ray_node_actor_name, ray_node_socket_path
from trainprobe.sidecar.config.settings import Settings

#: Every node actor's name starts with this.
NODE_ACTOR_PREFIX = ray_node_actor_name("")
#: Every job coordinator's name starts with this.
JOB_ACTOR_PREFIX = "trainprobe-job-"

__all__ = [
    "JOB_ACTOR_PREFIX",
    "NODE_ACTOR_PREFIX",
    "RAY_NAMESPACE",
    "is_job_actor_name",
    "is_node_actor_name",
    "job_coordinator_name",
    "node_incident_log",
    "ray_node_actor_name",
    "settings_for_node",
]


def is_node_actor_name(name: str) -> bool:
    return name.startswith(NODE_ACTOR_PREFIX) and len(name) > len(NODE_ACTOR_PREFIX)


def job_coordinator_name(job_id: str) -> str:
    """The name of job ``job_id``'s coordinator actor, the same on every node.

    Readable (the job id, squeezed to safe characters) and unique (a hash of
    the exact id, since squeezing can make two ids alike).
    """
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", job_id)[:48]
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:12]
    return f"{JOB_ACTOR_PREFIX}{slug}-{digest}"


def is_job_actor_name(name: str) -> bool:
    return name.startswith(JOB_ACTOR_PREFIX)


def node_incident_log(path: Path, node_id: str) -> Path:
    """``incidents.jsonl`` -> ``incidents-<node id prefix>.jsonl``.

    Several Ray nodes can share one file system (``ray.cluster_utils.Cluster``,
    NFS homes): each node's sidecar writes its own log.
    """
    return path.with_name(f"{path.stem}-{node_id[:12]}{path.suffix}")


def settings_for_node(settings: Settings, node_id: str) -> Settings:
    """The settings of the sidecar that serves ``node_id``, computed on that node.

    It listens on the node's socket (where the hooks there look first) and
    acts through the Ray connection of the actor it runs in.
    """
    return dataclasses.replace(
        settings,
        listen=(f"unix://{ray_node_socket_path(node_id)}",),
        incident_log=node_incident_log(settings.incident_log_path, node_id),
        ray_address=None,
        ray_per_node=False,
    )
