"""One line that makes a DDP loop replicated: ``model, opt = replicate(hook, model, opt)``.

Under ``trainprobe run --replicas N`` (or any launcher that sets torchft's
environment: ``TORCHFT_LIGHTHOUSE``, ``REPLICA_GROUP_ID``,
``NUM_REPLICA_GROUPS``, and the replica group's ``RANK``/``WORLD_SIZE``/
``MASTER_ADDR``/``MASTER_PORT``), :func:`replicate` wires a torchft
``Manager`` into a plain DDP loop: the process group the script made is its
replica group; gradients are averaged inside the group by the script's own DDP
and across the groups by the Manager; a step is committed only by the replicas
in its quorum, so a hung or lost replica group is evicted (by the sidecar) and
the others go on. Without ``TORCHFT_LIGHTHOUSE`` (plain ``torchrun``) it
changes nothing but ``hook.watch_ddp(model)``: the same script runs either way.
Under Ray Train with ``TorchftConfig`` (``ray_train.torchft_config``), the same
line in ``train_func``: the replica group's index and count come from Ray
Train's context (``report.replica_group.ray_train_replicas``: Ray Train gives
each replica group its own process group), the lighthouse from the
``TORCHFT_LIGHTHOUSE`` its backend sets, the store from the group's
``MASTER_ADDR``/``MASTER_PORT``; nothing else differs.

What it wires, and why each default:

- The Manager's state is ``{"model": model.state_dict(), "optim":
  opt.state_dict()}`` (the module under DDP), what a rejoining replica fetches
  from a live peer over HTTP before its first commit: parameters and optimizer
  state, not a checkpoint file, and nothing else (an LR scheduler, a data
  iterator's position or RNG state are not sent; the step count is, by torchft).
- ``min_replicas=1``: the survivors of a hang go on even when only one replica
  is left (availability first; raise it to refuse steps with too few samples).
- ``init_sync`` (torchft's default, on): at step 0 every replica takes the
  first one's parameters, so replicas need not be seeded alike (torchft picks
  that source per group rank: in groups of K > 1 ranks the optimizer wrapper
  then gives each group its rank 0's state, see ``replicated_optim.sync_group``).
- ``timeout_s=30`` for the replicated allreduce and commit, ``quorum_timeout_s
  =60``: long enough for a rejoining replica's transfer of a few GB, short of
  torchft's own 60 s. The sidecar evicts a hung replica long before either.
- The cross-replica transport is gloo for a gloo (CPU) job and NCCL for an
  NCCL one, as the script's own process group.
- The loop: the optimizer's ``zero_grad`` (wherever the loop calls it) or, if
  none came first, the model's forward starts the step's quorum; ``step``
  commits or discards. ``opt.steps(n)`` yields the number of the step being
  trained (``manager.current_step() + 1``) until ``n`` are committed, so a
  rejoining replica continues at the survivors' step and all end together.

What replication changes for the user: while a replica group is out, a step
averages the gradients of the groups in its quorum only (the global batch is
``participants x per-group batch``; the learning rate is not rescaled), and the
evicted group's data shard is not read until it rejoins (:meth:`sampler` shards
a dataset across groups and ranks, and never re-balances).
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from trainprobe.hooks.replicated_optim import (
    MIN_REPLICAS,
    QUORUM_TIMEOUT_S,
    REPLICA_PREFIX,
    TIMEOUT_S,
    ReplicatedOptimizer,
    replica_env,
)
from trainprobe.hooks.report.replica_group import RayReplicaGroup
from trainprobe.hooks.torchft import ft_comm_hook

log = logging.getLogger("trainprobe.hooks")

__all__ = [
    "REPLICA_PREFIX",
    "ReplicatedOptimizer",
    "comm_hook",
    "launcher_replica_group",
    "make_manager",
    "replica_env",
    "replicate",
]


def launcher_replica_group() -> RayReplicaGroup | None:
    """This process's replica group as the launcher's env names it, before (or
    without) a Manager: the hook's first Hello then already carries it. The id is
    the one :func:`replicate` gives the Manager."""
    env = replica_env()
    if env is None:
        return None
    rank = int(os.environ.get("RANK", "0") or 0)
    size = max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))
    return RayReplicaGroup(f"{REPLICA_PREFIX}{env[0]}", rank, size)


def _group_hook(state, bucket):  # type: ignore[no-untyped-def]
    """Average inside the replica group (the script's DDP group), then across groups.

    No annotations: DDP inspects them (see ddp.py)."""
    import torch.distributed as dist

    manager, group, size = state
    dist.all_reduce(bucket.buffer(), group=group)
    bucket.buffer().div_(size)
    return ft_comm_hook(manager, bucket)  # type: ignore[no-untyped-call]


def _transport(timeout: timedelta) -> Any:
    import torch.distributed as dist
    import torchft  # type: ignore[import-untyped]

    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torchft.ProcessGroupNCCL(timeout=timeout)
    return torchft.ProcessGroupGloo(timeout=timeout)


def make_manager(
    state_dict: Callable[[], Any],
    load_state_dict: Callable[[Any], None],
    *,
    min_replicas: int = MIN_REPLICAS,
    timeout_s: float = TIMEOUT_S,
    quorum_timeout_s: float = QUORUM_TIMEOUT_S,
    replica_id: str | None = None,
) -> Any:
    """This replica group's torchft ``Manager`` (defaults: see the module's doc),
    shut down at exit. Call once the replica group's process group (or store) exists."""
    import torch.distributed as dist
    import torchft

    group, _ = replica_env() or (0, 1)
    timeout = timedelta(seconds=timeout_s)
    ranked = dist.is_initialized()
    manager = torchft.Manager(
        pg=_transport(timeout),
        min_replica_size=min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=replica_id or f"{REPLICA_PREFIX}{group}",
        rank=dist.get_rank() if ranked else int(os.environ.get("RANK", "0")),
        world_size=dist.get_world_size() if ranked else int(os.environ.get("WORLD_SIZE", "1")),
        timeout=timeout,
        quorum_timeout=timedelta(seconds=quorum_timeout_s),
    )
    atexit.register(_shutdown, manager)
    return manager


def comm_hook(manager: Any, group_pg: Any, size: int) -> tuple[Any, Any]:
    """(state, hook) for ``DistributedDataParallel.register_comm_hook``: across the
    replica groups, after averaging inside a group of ``size`` > 1 ranks."""
    return ((manager, group_pg, size), _group_hook) if size > 1 else (manager, ft_comm_hook)


def replicate(
    hook: Any,
    model: Any,
    optimizer: Any,
    *,
    min_replicas: int = MIN_REPLICAS,
    timeout_s: float = TIMEOUT_S,
    quorum_timeout_s: float = QUORUM_TIMEOUT_S,
    replica_id: str | None = None,
) -> tuple[Any, Any]:
    """``model, opt = replicate(hook, model, opt)``: the loop's model and optimizer,
    replicated across the launcher's replica groups (see the module's doc).

    ``model``: the script's ``DistributedDataParallel`` over its process group
    (the replica group), or a bare module when each process is its own group
    (no process group needed). Use the model returned: it is a new DDP over the
    same module (the script's own is left unused). ``hook``: the script's
    ``LivenessProbeHook`` (or None). Call after ``init_process_group`` and
    before the first forward.
    """
    from torch import nn

    env = replica_env()
    if env is None:  # plain torchrun: plain DDP
        if os.environ.get("TORCHFT_LIGHTHOUSE"):
            log.warning(
                "trainprobe: TORCHFT_LIGHTHOUSE without REPLICA_GROUP_ID or Ray Train: "
                "not replicated"
            )
        if hook is not None and isinstance(model, nn.parallel.DistributedDataParallel):
            hook.watch_ddp(model)
        return model, ReplicatedOptimizer(optimizer, None)
    import torch.distributed as dist

    from trainprobe.hooks.torchft import DistributedDataParallel

    groups = env[1]
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    holder: list[Any] = []

    def state_dict() -> dict[str, Any]:
        return {"model": inner.state_dict(), "optim": holder[0].optim.state_dict()}

    def load_state_dict(sd: dict[str, Any]) -> None:
        inner.load_state_dict(sd["model"])
        holder[0].optim.load_state_dict(sd["optim"])

    manager = make_manager(
        state_dict,
        load_state_dict,
        min_replicas=min_replicas,
        timeout_s=timeout_s,
        quorum_timeout_s=quorum_timeout_s,
        replica_id=replica_id,
    )
    ranked = dist.is_initialized()
    opt = ReplicatedOptimizer(optimizer, manager)
    holder.append(opt)
    if hook is not None:
        hook.watch_torchft(manager, num_replicas=groups)
    size = dist.get_world_size() if ranked else 1
    if size > 1:
        # A fresh DDP over the replica group: find_unused_parameters keeps its
        # buckets as built (a reducer that rebuilds them after its first step, as
        # the script's own does, lays a rejoining replica's gradients out unlike
        # its peers', and their sum then mixes parameters up: torchft's own rule).
        group_pg = model.process_group if inner is not model else None
        model = nn.parallel.DistributedDataParallel(
            inner, process_group=group_pg, find_unused_parameters=True
        )
        model.register_comm_hook(*comm_hook(manager, group_pg, size))
    else:
        model = DistributedDataParallel(manager, inner)  # the same rule inside
    start: Callable[..., None] = lambda *_: opt.start_step()  # noqa: E731
    model.register_forward_pre_hook(start)
    return model, opt


def _shutdown(manager: Any) -> None:
    try:
        manager.shutdown(wait=False)
    except Exception:
        log.debug("trainprobe: Manager.shutdown failed", exc_info=True)
