"""NodeSidecar: one sidecar per Ray node, as a detached actor pinned to it.

The actor hosts a :class:`~trainprobe.sidecar.server.SidecarThread` that
listens on the node's socket, and holds the handles that hooks on its node
hand over, so that its :class:`~trainprobe.sidecar.ray.killer.RayKiller`
can ``ray.kill`` a worker by actor id. Its methods are what a Ray driver
needs to see the sidecar: :meth:`info`, :meth:`status`, :meth:`incidents`,
:meth:`shutdown`.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from trainprobe.sidecar.act.killers import SignalKiller
from trainprobe.sidecar.config.settings import Settings
from trainprobe.sidecar.core.text import configure_logging
from trainprobe.sidecar.ray.handles import HandleHolder, HandleStore
from trainprobe.sidecar.ray.killer import RayKiller
from trainprobe.sidecar.ray.link import RayLink
from trainprobe.sidecar.ray.naming import settings_for_node
from trainprobe.sidecar.threaded import SidecarThread
from trainprobe.sidecar.transport.commander import Commander


def _as_dict(msg: Any) -> dict[str, Any]:
    """A message as plain Python values (MessageToDict would turn int64 into str)."""
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if field.message_type is None:
            out[field.name] = list(value) if field.is_repeated else value
        elif field.is_repeated:
            out[field.name] = [_as_dict(v) for v in value]
        else:
            out[field.name] = _as_dict(value)
    return out


class NodeSidecar(HandleHolder):
    """The sidecar of the Ray node this actor runs on."""

    KIND = "node-sidecar"

    def __init__(self, settings: Settings) -> None:
        import ray

        configure_logging(settings.log_level)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.store = HandleStore()
        self.settings = settings_for_node(settings, self.node_id)
        link = RayLink(None, store=self.store, timeout_s=settings.ray_timeout_s)

        def killer(commander: Commander) -> RayKiller:
            return RayKiller(link, SignalKiller(commander), timeout_s=settings.ray_timeout_s)

        self._thread = SidecarThread(
            self.settings,
            killer_factory=killer,
            sidecar_id=f"{socket.gethostname()}/ray-node-{self.node_id[:8]}",
        ).start()
        self.started_at = time.time()

    def info(self) -> dict[str, Any]:
        """Where this sidecar runs and listens."""
        sidecar = self._thread.sidecar
        return {
            "kind": self.KIND,
            "node_id": self.node_id,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "socket": sidecar.addresses[0] if sidecar and sidecar.addresses else "",
            "incident_log": str(self.settings.incident_log_path),
            "started_at": self.started_at,
            "handles": len(self.store),
        }

    def status(self, job_id: str = "") -> list[dict[str, Any]]:
        """One dict per worker, as ``trainprobe status --json`` shows them."""
        sidecar = self._thread.sidecar
        assert sidecar is not None
        reply = self._thread.call(lambda: sidecar.status(job_id))
        return [_as_dict(w) for w in reply.workers]

    def incidents(self) -> list[dict[str, Any]]:
        """The most recent incident, action and recovery records, oldest first."""
        sidecar = self._thread.sidecar
        assert sidecar is not None
        return self._thread.call(lambda: list(sidecar.incident_log.recent))

    def diagnose(self, job_id: str) -> dict[str, Any]:
        """``trainprobe diagnose`` for this node's sidecar: ``{"text": ..., "json": ...}``."""
        sidecar = self._thread.sidecar
        assert sidecar is not None
        reply = self._thread.call_async(lambda: sidecar.diagnose(job_id))
        return {"job_id": reply.job_id, "text": reply.text, "json": reply.json}

    def shutdown(self) -> bool:
        """Stop serving (the socket is removed); the caller then kills the actor."""
        self._thread.stop()
        return True
