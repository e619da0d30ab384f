"""trainprobe on Ray: one sidecar per node, and kills that go through Ray.

Public API:

- :func:`start_sidecars`, :func:`stop_sidecars`, :func:`list_sidecars`: a
  detached, node-pinned sidecar actor on every alive node
  (``trainprobe-sidecar --ray-per-node`` calls :func:`start_sidecars`).
- :func:`node_sidecar`: the actor handle of one node's sidecar
  (``info``, ``status``, ``incidents``, ``shutdown``).
- :class:`RayKiller`: kills a worker's actor by id through Ray and falls back
  to signalling its pid; :class:`RayLink` is its line to Ray.
- :class:`RayWatcher`: snapshots placement groups, tasks and actors and judges
  rules ``placement_group`` and ``wait_cycle``; :class:`RayFindingResponder`
  makes its findings incidents and ends actors (:func:`end_actors`) per
  ``on_ray_finding``.

Nothing here imports Ray until it is used.
"""

from trainprobe.sidecar.core.lazy import lazy_exports

__all__ = [
    "HandleRegistry",
    "HandleStore",
    "NodeSidecar",
    "NodeSidecarInfo",
    "RayFindingResponder",
    "RayKiller",
    "RayLink",
    "RayUnavailable",
    "RayWatcher",
    "alive_node_ids",
    "end_actors",
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
        "RayFindingResponder": "responder",
        "RayKiller": "killer",
        "RayLink": "link",
        "RayUnavailable": "link",
        "RayWatcher": "watcher",
        "alive_node_ids": "placement",
        "end_actors": "ending",
        "list_sidecars": "placement",
        "node_sidecar": "placement",
        "settings_for_node": "naming",
        "start_sidecars": "placement",
        "stop_sidecars": "placement",
    },
)
