"""Hands this Ray actor's own handle to its node's sidecar, so it can be killed by id.

Ray 2.60 has no public call that kills an unnamed actor given only its id:
``ray.kill`` takes a handle, ``ray kill-actor`` takes a name, and the
dashboard no longer serves ``/api/actors/kill`` (ray-project/ray#59573 asks
for one). An actor can get its own handle from
``ray.get_runtime_context().current_actor``, and that handle is a weak
reference, so whoever holds it does not keep the actor alive. The hook passes
it to the named actor that stands for its node's sidecar
(:func:`trainprobe.proto.ray_node_actor_name`), which can then
``ray.kill`` the actor by id.

All of it runs in one daemon thread: right away, again after every new
sidecar session (the sidecar may have restarted and lost what it held), and
with capped backoff until it succeeds. Nothing here touches the training
thread, and no failure leaves this thread.
"""

from __future__ import annotations

import logging
import sys
import threading

from trainprobe.proto import RAY_NAMESPACE, Backoff, ray_node_actor_name

log = logging.getLogger("trainprobe.hooks")

#: Longest wait for the registry to answer one registration.
REGISTER_TIMEOUT_S = 10.0


class HandleRegistration:
    """Keeps this actor's handle registered with the sidecar of its Ray node."""

    def __init__(self, node_id: str, actor_id: str, pid: int, backoff_cap_s: float = 60.0) -> None:
        self.node_id = node_id
        self.actor_id = actor_id
        self.pid = pid
        self.registered = False
        self.attempts = 0
        self.last_error = ""
        self._backoff = Backoff(initial_s=1.0, cap_s=backoff_cap_s)
        self._wake = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="trainprobe-ray-handle", daemon=True)

    def start(self) -> None:
        self._wake.set()
        self._thread.start()

    def poke(self) -> None:
        """Register again soon (called when a new sidecar session starts)."""
        self._wake.set()

    def stop(self) -> None:
        self._closing = True
        self._wake.set()

    def _run(self) -> None:
        delay: float | None = None
        while not self._closing:
            self._wake.wait(delay)
            self._wake.clear()
            if self._closing:
                return
            if self.register_once():
                self._backoff.reset()
                delay = None  # until the next session
            else:
                delay = self._backoff.next_delay()

    def register_once(self) -> bool:
        """One registration attempt; True if the node's sidecar holds our handle."""
        self.attempts += 1
        ray = sys.modules.get("ray")
        try:
            if ray is None or not ray.is_initialized():
                raise RuntimeError("ray is not initialized in this process")
            registry = ray.get_actor(ray_node_actor_name(self.node_id), namespace=RAY_NAMESPACE)
            me = ray.get_runtime_context().current_actor
            ray.get(
                registry.register_worker.remote(self.actor_id, me, self.pid),
                timeout=REGISTER_TIMEOUT_S,
            )
        except Exception as err:  # absent registry, Ray trouble: retried later
            self.registered = False
            self.last_error = f"{type(err).__name__}: {err}"
            log.debug("trainprobe: handle registration failed: %s", self.last_error)
            return False
        self.registered = True
        self.last_error = ""
        return True
