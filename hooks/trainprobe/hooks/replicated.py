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

What it wires, and why each default:

- The Manager's state is ``{"model": model.state_dict(), "optim":
  opt.state_dict()}`` (the module under DDP), what a rejoining replica fetches
  from a live peer over HTTP before its first commit: parameters and optimizer
  state, not a checkpoint file, and nothing else (an LR scheduler, a data
  iterator's position or RNG state are not sent; the step count is, by torchft).
- ``min_replicas=1``: the survivors of a hang go on even when only one replica
  is left (availability first; raise it to refuse steps with too few samples).
- ``init_sync`` (torchft's default, on): at step 0 every replica takes the
  first one's parameters, so replicas need not be seeded alike.
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
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from trainprobe.hooks.torchft import RayReplicaGroup, ft_comm_hook

log = logging.getLogger("trainprobe.hooks")

__all__ = [
    "REPLICA_PREFIX",
    "ReplicatedOptimizer",
    "launcher_replica_group",
    "replica_env",
    "replicate",
]

#: A replica group's id is this and its index (torchft's global rank reads the digits).
REPLICA_PREFIX = "replica_"


def replica_env() -> tuple[int, int] | None:
    """(this replica group's index, number of groups) from the launcher's env
    (``TORCHFT_LIGHTHOUSE`` and ``REPLICA_GROUP_ID``, as torchft's torchx sets
    them too), or None."""
    group = os.environ.get("REPLICA_GROUP_ID", "")
    if not os.environ.get("TORCHFT_LIGHTHOUSE") or not group.isdigit():
        return None
    return int(group), max(int(group) + 1, int(os.environ.get("NUM_REPLICA_GROUPS", "1") or 1))


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


def _optimizer_base() -> type:
    import torch

    return torch.optim.Optimizer


class _Wrapper:
    """What :class:`ReplicatedOptimizer` adds to the script's optimizer."""

    def __init__(self, optim: Any, manager: Any) -> None:
        # Like torchft's OptimizerWrapper: no Optimizer.__init__, everything is optim's.
        self.optim = optim
        self.manager = manager
        self._pending = False  # a quorum was started for the step being trained
        self._total: int | None = None
        self._local = 0

    # -- torch.optim.Optimizer ----------------------------------------------------

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optim.param_groups  # type: ignore[no-any-return]

    @property
    def state(self) -> Any:
        return self.optim.state

    def state_dict(self) -> dict[str, Any]:
        return self.optim.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optim.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optim.add_param_group(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.start_step()
        self.optim.zero_grad(set_to_none)

    def step(self, closure: Any = None) -> Any:
        if self.manager is None:
            self._local += 1
            return self.optim.step(closure)
        if closure is not None:
            raise ValueError("a replicated optimizer takes no closure (torchft's rule)")
        self.start_step()  # a loop with no zero_grad and no forward before step
        self._pending = False
        if self.manager.should_commit():  # False: the quorum lost a replica, step discarded
            self.optim.step()
        return None

    # -- the replicated loop ------------------------------------------------------

    def start_step(self) -> None:
        """Start this step's quorum (once a step; not past the last step)."""
        if self.manager is None or self._pending:
            return
        if self._total is not None and self.manager.current_step() >= self._total:
            return  # the loop is over: a quorum now would wait for replicas that left
        self.manager.start_quorum()
        self._pending = True

    def steps(self, total: int) -> Iterator[int]:
        """The step being trained, 1-based, until ``total`` steps are committed."""
        self._total = total
        while (done := self.committed()) < total:
            yield done + 1

    def committed(self) -> int:
        """Steps committed so far (after a rejoin: the survivors' count)."""
        return self._local if self.manager is None else int(self.manager.current_step())

    def sampler(self, dataset: Any, **kwargs: Any) -> Any:
        """A ``DistributedSampler`` of ``dataset`` for this rank: one shard per rank of
        every replica group (``shuffle``, ``seed``, ``drop_last`` as torch's)."""
        import torch.distributed as dist
        from torch.utils.data import DistributedSampler

        group, groups = replica_env() or (0, 1)
        rank = dist.get_rank() if dist.is_initialized() else 0
        size = dist.get_world_size() if dist.is_initialized() else 1
        return DistributedSampler(
            dataset, num_replicas=groups * size, rank=group * size + rank, **kwargs
        )


_CLASS: list[type] = []


def ReplicatedOptimizer(optim: Any, manager: Any) -> Any:
    """The script's optimizer, committing through ``manager`` (None: plain). An
    ``isinstance`` of ``torch.optim.Optimizer``, so LR schedulers take it."""
    if not _CLASS:
        _CLASS.append(type("ReplicatedOptimizer", (_Wrapper, _optimizer_base()), {}))
    return _CLASS[0](optim, manager)


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


def replicate(
    hook: Any,
    model: Any,
    optimizer: Any,
    *,
    min_replicas: int = 1,
    timeout_s: float = 30.0,
    quorum_timeout_s: float = 60.0,
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
            log.warning("trainprobe: TORCHFT_LIGHTHOUSE without REPLICA_GROUP_ID: not replicated")
        if hook is not None and isinstance(model, nn.parallel.DistributedDataParallel):
            hook.watch_ddp(model)
        return model, ReplicatedOptimizer(optimizer, None)
    import torch.distributed as dist
    import torchft

    from trainprobe.hooks.torchft import DistributedDataParallel

    group, groups = env
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    holder: list[Any] = []

    def state_dict() -> dict[str, Any]:
        return {"model": inner.state_dict(), "optim": holder[0].optim.state_dict()}

    def load_state_dict(sd: dict[str, Any]) -> None:
        inner.load_state_dict(sd["model"])
        holder[0].optim.load_state_dict(sd["optim"])

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
        model.register_comm_hook((manager, group_pg, size), _group_hook)
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
