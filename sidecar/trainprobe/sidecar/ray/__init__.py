"""trainprobe on Ray: one sidecar per node, and kills that go through Ray.

Public API:

- :func:`start_sidecars`, :func:`stop_sidecars`, :func:`list_sidecars`: a
  detached, node-pinned sidecar actor on every alive node
  (``trainprobe-sidecar --ray-per-node`` calls :func:`start_sidecars`).
- :func:`node_sidecar`: the actor handle of one node's sidecar
  (``info``, ``status``, ``incidents``, ``shutdown``).
- :class:`RayKiller`: kills a worker's actor by id through Ray and falls back
  to signalling its pid; :class:`RayLink` is its line to Ray.

Nothing here imports Ray until it is used.
"""

from trainprobe.sidecar._lazy import lazy_exports

__all__ = [
    "HandleRegistry",
    "HandleStore",
    "NodeSidecar",
    "NodeSidecarInfo",
    "RayKiller",
    "RayLink",
    "RayUnavailable",
    "alive_node_ids",
    "list_sidecars",
    "node_sidecar",
    "settings_for_node",
    "start_sidecars",
    "stop_sidecars",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "HandleRegistry": "handles",
        "HandleStore": "handles",
        "NodeSidecar": "node_actor",
        "NodeSidecarInfo": "placement",
        "RayKiller": "killer",
        "RayLink": "link",
        "RayUnavailable": "link",
        "alive_node_ids": "placement",
        "list_sidecars": "placement",
        "node_sidecar": "placement",
        "settings_for_node": "naming",
        "start_sidecars": "placement",
        "stop_sidecars": "placement",
    },
)
