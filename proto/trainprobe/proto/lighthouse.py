"""The torchft lighthouse settings of a replicated job, for both ends.

``trainprobe run --replicas`` (the sidecar's launcher) starts its lighthouse
with them, and ``trainprobe.hooks.ray_train.torchft_config`` hands them to
Ray Train's ``TorchftConfig``; the hooks never import the sidecar, so they
live here.

torchft 0.2.0's lighthouse has no call that drops a replica: the survivors'
next quorum forms only once the evicted replica's heartbeats are
``heartbeat_timeout_ms`` old (torchft's default 5,000 ms), and a replica whose
heartbeats only pause is not lost by that (it rejoins at its next quorum and
heals from a peer). trainprobe judges hangs itself, so 1,000 ms (10 of the
Manager's 100 ms heartbeats) costs no eviction. ``join_timeout_ms``: how long a
quorum waits for a replica that heartbeats but has not joined (torchft's
default 60,000 ms holds up 3 or more replicas while a replacement starts).
"""

from __future__ import annotations

__all__ = ["HEARTBEAT_TIMEOUT_MS", "JOIN_TIMEOUT_MS", "LIGHTHOUSE_DEFAULTS", "MIN_REPLICAS"]

#: The lighthouse drops a replica whose heartbeats are this old.
HEARTBEAT_TIMEOUT_MS = 1_000
#: How long a quorum waits for replicas that heartbeat but have not joined.
JOIN_TIMEOUT_MS = 10_000
#: A quorum of one: a lone survivor trains on.
MIN_REPLICAS = 1

#: The same, as the lighthouse's (and ``TorchftConfig``'s ``lighthouse_kwargs``) names.
LIGHTHOUSE_DEFAULTS: dict[str, int] = {
    "min_replicas": MIN_REPLICAS,
    "join_timeout_ms": JOIN_TIMEOUT_MS,
    "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS,
}
