"""Conventions the hook and the sidecar share that the core judges by.

Declared once here, in the pure core (standard library only); the wire
contract, :mod:`trainprobe.proto`, re-exports them for the hook.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

__all__ = ["INIT_PHASE", "RENDEZVOUS_PHASE", "STACK_SIGNALS", "STARTUP_PHASES", "RayIds"]

#: Signals a hook may arm for faulthandler stacks, and so the only ones a
#: sidecar ever sends as the stack signal: the real-time ones, which nothing
#: uses by default (never SIGKILL, SIGTERM, SIGSTOP, SIGINT...).
STACK_SIGNALS = range(int(signal.SIGRTMIN), int(signal.SIGRTMAX) + 1)

#: The phases a hook made before ``init_process_group`` reports by itself:
#: ``init`` from its birth to the process group (or its first step), and,
#: within it, ``rendezvous`` while its training thread is inside
#: torch.distributed's set-up, waiting for its peers.
INIT_PHASE = "init"
RENDEZVOUS_PHASE = "rendezvous"
STARTUP_PHASES = frozenset({INIT_PHASE, RENDEZVOUS_PHASE})


@dataclass(frozen=True)
class RayIds:
    """Who a worker is to Ray (probe.proto's ``RayIdentity``): the ids the hook
    reads from its runtime context, and the sidecar checks and kills by
    (``ray.kill`` of ``actor_id``). ``run_name`` is Ray Train's run (or
    trial) name. All empty outside Ray."""

    job_id: str = ""
    node_id: str = ""
    actor_id: str = ""
    worker_id: str = ""
    run_name: str = ""
