"""Where Ray actor handles handed over by hooks are kept.

A hook running in a Ray actor passes its own (weak) handle to the actor named
:func:`trainprobe.proto.ray_node_actor_name` for its node, because Ray has no
public way to kill an unnamed actor by id (see ``trainprobe.hooks.report.ray_handle``).
That actor is the per-node sidecar (:class:`~trainprobe.sidecar.ray.node_actor.NodeSidecar`)
or, for a stand-alone sidecar started with ``--ray-address``, a
:class:`HandleRegistry`. Both keep the handles in a :class:`HandleStore`.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

#: Most handles one store keeps; the oldest go first (their actors are long gone).
MAX_HANDLES = 4096


class HandleStore:
    """Actor handles by actor id (hex), bounded, oldest dropped first."""

    def __init__(self, max_entries: int = MAX_HANDLES) -> None:
        self.max_entries = max_entries
        self._handles: OrderedDict[str, tuple[Any, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._handles)

    def put(self, actor_id: str, handle: Any, pid: int) -> None:
        self._handles.pop(actor_id, None)
        self._handles[actor_id] = (handle, pid)
        while len(self._handles) > self.max_entries:
            self._handles.popitem(last=False)

    def get(self, actor_id: str) -> Any | None:
        entry = self._handles.get(actor_id)
        return entry[0] if entry is not None else None

    def pop(self, actor_id: str) -> None:
        self._handles.pop(actor_id, None)

    def pids(self) -> dict[str, int]:
        return {aid: pid for aid, (_, pid) in self._handles.items()}


class HandleHolder:
    """The actor methods hooks and killers call; mixed into both Ray actors."""

    store: HandleStore

    def register_worker(self, actor_id: str, handle: Any, pid: int) -> bool:
        """Keep ``handle`` (the hook's own actor) under ``actor_id``."""
        self.store.put(str(actor_id), handle, int(pid))
        return True

    def unregister_worker(self, actor_id: str) -> bool:
        self.store.pop(str(actor_id))
        return True

    def handle(self, actor_id: str) -> Any | None:
        """The handle registered for ``actor_id``, or None."""
        return self.store.get(str(actor_id))


class HandleRegistry(HandleHolder):
    """The Ray face of a stand-alone sidecar: only holds handles.

    Created by :class:`~trainprobe.sidecar.ray.link.RayLink` on the sidecar's
    own node, owned by the sidecar's Ray driver, so it goes away with it.
    """

    KIND = "registry"

    def __init__(self) -> None:
        import ray

        self.store = HandleStore()
        self.node_id = ray.get_runtime_context().get_node_id()

    def info(self) -> dict[str, object]:
        return {"kind": self.KIND, "node_id": self.node_id, "pid": os.getpid()}
