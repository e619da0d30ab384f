"""The sidecar's thin, blocking line to Ray: connect, find a handle, kill, read state.

Every call here blocks; :class:`~trainprobe.sidecar.ray.killer.RayKiller`
runs them on its own threads with a deadline, never on the sidecar's loop.

Two set-ups:

- inside the per-node sidecar actor, Ray is already connected and handles
  arrive in the actor's own :class:`HandleStore` (``address=None``);
- a stand-alone sidecar with ``--ray-address`` connects as a Ray driver in a
  background thread and creates a :class:`HandleRegistry` actor for its node,
  which the hooks there hand their handles to.

Ray's own clients carry its token authentication (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``), so nothing here handles
tokens.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from trainprobe.proto import RAY_NAMESPACE, ray_node_actor_name
from trainprobe.sidecar.ray.handles import HandleRegistry, HandleStore

log = logging.getLogger("trainprobe.sidecar")


class RayUnavailable(RuntimeError):
    """Ray cannot be used for this kill; the caller falls back to signals."""


def probe_address(address: str, timeout_s: float = 1.0) -> None:
    """Fail fast when a ``host:port`` GCS address refuses connections.

    ``ray.init`` would otherwise retry an unreachable address for minutes.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto" and other forms: left to ray.init
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise RayUnavailable(f"Ray GCS at {address} is not reachable: {err}") from None


class RayLink:
    """Blocking Ray calls for one sidecar. ``address=None``: Ray is already connected."""

    def __init__(
        self,
        address: str | None,
        store: HandleStore | None = None,
        timeout_s: float = 10.0,
        retry_cap_s: float = 60.0,
    ) -> None:
        self.address = address
        self.store = store
        self.timeout_s = timeout_s
        self.retry_cap_s = retry_cap_s
        self.node_id = ""
        self.last_error = ""
        self._registry: Any = None
        self._ready = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        if address is None:
            self._ready.set()

    # -- connection ---------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background, retrying with backoff until it works."""
        if self._ready.is_set() or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._connect_loop, name="trainprobe-ray-connect")
        self._thread.daemon = True
        self._thread.start()

    def _connect_loop(self) -> None:
        delay = 2.0
        while not self._closing.is_set():
            try:
                self._connect()
            except ImportError as err:  # no Ray here: retrying cannot help
                self.last_error = f"ray is not installed: {err}"
                log.warning("cannot use Ray at %s: %s", self.address, self.last_error)
                return
            except Exception as err:
                self.last_error = f"{type(err).__name__}: {err}"
                log.warning("cannot use Ray at %s (%s); retrying", self.address, self.last_error)
                self._closing.wait(delay)
                delay = min(self.retry_cap_s, delay * 2)
                continue
            self._ready.set()
            return

    def _connect(self) -> None:
        assert self.address is not None
        probe_address(self.address)
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            ray.init(
                address=self.address,
                namespace=RAY_NAMESPACE,
                log_to_driver=False,
                configure_logging=False,
            )
        self.node_id = ray.get_runtime_context().get_node_id()
        registry = (
            ray.remote(HandleRegistry)
            .options(
                name=ray_node_actor_name(self.node_id),
                namespace=RAY_NAMESPACE,
                get_if_exists=True,
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False),
            )
            .remote()
        )
        ray.get(registry.info.remote(), timeout=self.timeout_s)  # type: ignore[union-attr]
        self._registry = registry
        log.info("connected to Ray at %s as node %s", self.address, self.node_id)

    def wait_ready(self, timeout_s: float) -> None:
        """Block until connected; raise :class:`RayUnavailable` after ``timeout_s``."""
        self.start()
        if not self._ready.wait(timeout_s):
            raise RayUnavailable(
                f"Ray at {self.address} not usable within {timeout_s:g}s"
                + (f" ({self.last_error})" if self.last_error else "")
            )

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def close(self) -> None:
        """Stop retrying; disconnect if this link connected Ray itself."""
        self._closing.set()
        if self.address is not None and self._ready.is_set():
            import ray

            ray.shutdown()

    # -- calls --------------------------------------------------------------------

    def handle(self, actor_id: str) -> Any | None:
        """The handle the hook of ``actor_id`` registered, or None."""
        if self.store is not None:
            return self.store.get(actor_id)
        import ray

        return ray.get(self._registry.handle.remote(actor_id), timeout=self.timeout_s)

    def kill(self, actor_id: str, no_restart: bool) -> None:
        """``ray.kill`` the actor; :class:`RayUnavailable` if we hold no handle for it."""
        import ray

        handle = self.handle(actor_id)
        if handle is None:
            raise RayUnavailable(f"no handle registered for actor {actor_id}")
        ray.kill(handle, no_restart=no_restart)
        if self.store is not None:
            self.store.pop(actor_id)
        elif self._registry is not None:
            self._registry.unregister_worker.remote(actor_id)

    def actor_state(self, actor_id: str) -> dict[str, Any] | None:
        """The actor's entry in Ray's State API (needs the dashboard), or None."""
        import ray
        from ray.util.state import get_actor

        # Our own cluster's address: left to itself, the State API looks for
        # "any running local Ray cluster" and fails when a host runs several.
        address = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
        actor = get_actor(actor_id, address=address, timeout=max(1, int(self.timeout_s)))
        if actor is None:
            return None
        return {
            "state": getattr(actor, "state", ""),
            "pid": getattr(actor, "pid", 0),
            "death_cause": getattr(actor, "death_cause", None),
            "node_id": getattr(actor, "node_id", ""),
            "class_name": getattr(actor, "class_name", ""),
        }
