"""The replica group Ray Train (``TorchftConfig``) runs this worker in, told
without a torchft Manager: who the process is, next to :mod:`.identity`.
``trainprobe.hooks.torchft`` re-exports both names (where they were first).
"""

from __future__ import annotations

import logging
import os

from trainprobe.proto import probe_pb2

log = logging.getLogger("trainprobe.hooks")

__all__ = [
    "RAY_LIGHTHOUSE_ENV",
    "RAY_REPLICA_PREFIX",
    "RayReplicaGroup",
    "ray_train_group",
    "ray_train_replica_group",
    "ray_train_replicas",
]

#: Set on every worker of a Ray Train run with TorchftConfig (Ray's own constant's value).
RAY_LIGHTHOUSE_ENV = "TORCHFT_LIGHTHOUSE"
#: The replica id of a Ray Train replica group seen without a Manager.
RAY_REPLICA_PREFIX = "ray_replica_"


class RayReplicaGroup:
    """The replica group Ray Train (``TorchftConfig``) runs this worker in.

    Ray Train 2.60 gives each replica group its own process group and
    replaces a failed group alone; a worker knows its group from its world
    rank and its group's process group (replica index = (world rank - group
    rank) // group world size). That is the identity a hook reports under
    Ray Train before, or without, a torchft Manager: the replica id
    ``ray_replica_<index>``, group rank and group world size. The quorum id
    and step, and where the training thread waits, come from a Manager
    (``watch_torchft``), which then replaces this one.
    """

    __slots__ = ("group_rank", "group_world_size", "replica_id")

    def __init__(self, replica_id: str, group_rank: int, group_world_size: int) -> None:
        self.replica_id = replica_id
        self.group_rank = group_rank
        self.group_world_size = group_world_size

    def identity_pb(self) -> probe_pb2.ReplicaIdentity:
        return probe_pb2.ReplicaIdentity(
            replica_id=self.replica_id,
            group_rank=self.group_rank,
            group_world_size=self.group_world_size,
        )

    def collect(self, report: probe_pb2.Report) -> None:
        """Nothing: without a Manager there is no quorum to report."""

    def report_error(self, text: str) -> bool:
        return False  # no Manager to tell: the survivor's torchft finds out by itself


def ray_train_replica_group(ray_ranks: dict[str, int]) -> RayReplicaGroup | None:
    """This worker's Ray Train replica group, or None outside a TorchftConfig run.

    ``ray_ranks``: what :func:`trainprobe.hooks.report.identity.ray_ids` read from
    ``ray.train.get_context()`` (empty outside Ray Train). A TorchftConfig run
    is told by ``TORCHFT_LIGHTHOUSE``, which its backend sets on every worker
    before ``train_func``.
    """
    found = ray_train_group(ray_ranks)
    if found is None:
        return None
    index, _, group_rank, group_world = found
    return RayReplicaGroup(f"{RAY_REPLICA_PREFIX}{index}", group_rank, group_world)


def ray_train_group(ray_ranks: dict[str, int]) -> tuple[int, int, int, int] | None:
    """(replica group index, number of groups, group rank, group size) of this
    Ray Train worker, or None outside a TorchftConfig run (see
    :func:`ray_train_replica_group`): index = (world rank - group rank) //
    group size, groups = world size // group size."""
    if "rank" not in ray_ranks or not os.environ.get(RAY_LIGHTHOUSE_ENV):
        return None
    group_rank, group_world = 0, 1
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            group_rank, group_world = int(dist.get_rank()), max(1, int(dist.get_world_size()))
    except Exception:
        log.debug("trainprobe: no process group to read the replica group from", exc_info=True)
    index = max(0, int(ray_ranks["rank"]) - group_rank) // group_world
    groups = max(index + 1, int(ray_ranks.get("world_size", 1)) // group_world)
    return index, groups, group_rank, group_world


def ray_train_replicas() -> tuple[int, int] | None:
    """(this worker's replica group index, number of groups) under Ray Train with
    ``TorchftConfig``, read from Ray Train's context now; None elsewhere."""
    from trainprobe.hooks.report.identity import ray_ids

    found = ray_train_group(ray_ids()[1])
    return None if found is None else found[:2]
