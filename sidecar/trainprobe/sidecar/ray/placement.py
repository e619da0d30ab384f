"""Placing one sidecar on every Ray node: start, list, stop.

Each sidecar is a detached :class:`~trainprobe.sidecar.ray.node_actor.NodeSidecar`
named after its node and pinned there with
``NodeAffinitySchedulingStrategy(node_id, soft=False)``. Names make
:func:`start_sidecars` idempotent (``get_if_exists``): calling it again adds
sidecars only on nodes that joined since.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from trainprobe.sidecar.config.settings import Settings, load_settings
from trainprobe.sidecar.ray.link import probe_address
from trainprobe.sidecar.ray.naming import RAY_NAMESPACE, is_node_actor_name, ray_node_actor_name

log = logging.getLogger("trainprobe.sidecar")

#: A per-node sidecar that crashes is started again this many times.
NODE_SIDECAR_MAX_RESTARTS = 3


@dataclass(frozen=True)
class NodeSidecarInfo:
    """One node's sidecar, as :func:`start_sidecars` and :func:`list_sidecars` see it."""

    node_id: str
    actor_name: str
    kind: str = ""
    socket: str = ""
    hostname: str = ""
    pid: int = 0
    incident_log: str = ""
    #: True if this call created it; False if it was already there.
    created: bool = False
    #: Why this node has no working sidecar, if it has none.
    error: str = ""


def _ray(settings: Settings | None) -> Any:
    """Ray, connected: to ``settings.ray_address`` (default ``auto``) if not already."""
    import ray

    if not ray.is_initialized():
        address = (settings.ray_address if settings else None) or "auto"
        probe_address(address)  # RayUnavailable now, not ray.init's minutes of retries
        ray.init(address=address, namespace=RAY_NAMESPACE, log_to_driver=False)
    return ray


def alive_node_ids() -> list[str]:
    """Ids of the Ray nodes that are alive now."""
    import ray

    return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]


def node_sidecar(node_id: str) -> Any:
    """The handle of ``node_id``'s sidecar actor (ValueError if it has none)."""
    import ray

    return ray.get_actor(ray_node_actor_name(node_id), namespace=RAY_NAMESPACE)


def _info(node_id: str, raw: dict[str, Any], created: bool) -> NodeSidecarInfo:
    return NodeSidecarInfo(
        node_id=node_id,
        actor_name=ray_node_actor_name(node_id),
        kind=str(raw.get("kind", "")),
        socket=str(raw.get("socket", "")),
        hostname=str(raw.get("hostname", "")),
        pid=int(raw.get("pid", 0)),
        incident_log=str(raw.get("incident_log", "")),
        created=created,
    )


def start_sidecars(
    settings: Settings | None = None, timeout_s: float = 60.0
) -> list[NodeSidecarInfo]:
    """Make sure every alive node runs a sidecar; returns one entry per node.

    ``settings`` (default: :func:`~trainprobe.sidecar.config.settings.load_settings`,
    that is file < env) configure every sidecar; each listens on its node's
    socket and writes its own incident log. Connects to Ray first if this
    process is not connected yet (``settings.ray_address``, else ``auto``).
    """
    settings = settings or load_settings()
    ray = _ray(settings)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from trainprobe.sidecar.ray.node_actor import NodeSidecar

    cls = ray.remote(NodeSidecar)
    pending: list[tuple[str, Any, bool]] = []
    for node_id in alive_node_ids():
        name = ray_node_actor_name(node_id)
        try:
            actor, created = ray.get_actor(name, namespace=RAY_NAMESPACE), False
        except ValueError:
            actor = cls.options(
                name=name,
                namespace=RAY_NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                max_restarts=NODE_SIDECAR_MAX_RESTARTS,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(settings)
            created = True
        pending.append((node_id, actor, created))
    out = []
    for node_id, actor, created in pending:
        try:
            out.append(_info(node_id, ray.get(actor.info.remote(), timeout=timeout_s), created))
        except Exception as err:
            log.error("no trainprobe sidecar on Ray node %s: %s", node_id, err)
            out.append(
                NodeSidecarInfo(
                    node_id, ray_node_actor_name(node_id), created=created, error=str(err)
                )
            )
    return out


def _named_node_actors() -> list[tuple[str, Any]]:
    import ray
    from ray.util import list_named_actors

    out = []
    for entry in list_named_actors(all_namespaces=True):
        if entry.get("namespace") == RAY_NAMESPACE and is_node_actor_name(entry.get("name", "")):
            name = entry["name"]
            try:
                out.append((name, ray.get_actor(name, namespace=RAY_NAMESPACE)))
            except ValueError:
                continue  # went away meanwhile
    return out


def list_sidecars(timeout_s: float = 10.0) -> list[NodeSidecarInfo]:
    """Every node actor trainprobe runs (per-node sidecars and stand-alone registries)."""
    import ray

    out = []
    for name, actor in _named_node_actors():
        node_id = name[len(ray_node_actor_name("")) :]
        try:
            out.append(_info(node_id, ray.get(actor.info.remote(), timeout=timeout_s), False))
        except Exception as err:
            out.append(NodeSidecarInfo(node_id, name, error=str(err)))
    return out


def stop_sidecars(timeout_s: float = 30.0) -> list[str]:
    """Stop every per-node sidecar (not stand-alone registries); returns their node ids.

    Each first stops serving (its socket is removed), then its actor is killed.
    The jobs' coordinators go too: they only serve sidecars (a stand-alone
    sidecar still running creates its job's again on its next sync).
    """
    import ray

    stopped = []
    for name, actor in _named_node_actors():
        try:
            kind = ray.get(actor.info.remote(), timeout=timeout_s).get("kind")
        except Exception:
            kind = "unknown"  # a sidecar that cannot answer is stopped all the same
        if kind == "registry":
            continue  # owned by a stand-alone sidecar, which removes it itself
        try:
            ray.get(actor.shutdown.remote(), timeout=timeout_s)
        except Exception as err:
            log.warning("sidecar %s did not shut down cleanly: %s", name, err)
        ray.kill(actor, no_restart=True)
        stopped.append(name[len(ray_node_actor_name("")) :])
    from trainprobe.sidecar.ray.coordinator import stop_coordinators

    stop_coordinators()
    return stopped
