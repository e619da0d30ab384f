"""The replicated loop's optimizer, and the launcher's replica-group environment.

:func:`ReplicatedOptimizer` wraps the script's optimizer (an ``isinstance`` of
``torch.optim.Optimizer``): ``zero_grad`` (or the model's forward, through
:meth:`start_step`) starts the step's torchft quorum, ``step`` commits it or
discards it, ``steps(n)`` counts committed steps. Without a Manager it is the
optimizer itself (plain DDP under torchrun). See trainprobe.hooks.replica.replicate.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MIN_REPLICAS",
    "QUORUM_TIMEOUT_S",
    "REPLICA_PREFIX",
    "TIMEOUT_S",
    "ReplicatedOptimizer",
    "replica_env",
    "replica_sampler",
    "sync_group",
]

#: A replica group's id is this and its index (torchft's global rank reads the digits).
REPLICA_PREFIX = "replica_"
#: The defaults of replicate() and the framework callbacks, one source (why each:
#: docs/RECOVERY.md's table of defaults): the survivors go on down to one
#: replica; a collective, commit or state transfer waits 30 s; a quorum 60 s.
MIN_REPLICAS = 1
TIMEOUT_S = 30.0
QUORUM_TIMEOUT_S = 60.0


def replica_env() -> tuple[int, int] | None:
    """(this replica group's index, number of groups), or None: from the launcher's
    env (``TORCHFT_LIGHTHOUSE`` and ``REPLICA_GROUP_ID``, as torchft's torchx sets
    them too) or, under Ray Train with ``TorchftConfig`` (``TORCHFT_LIGHTHOUSE``
    alone), from Ray Train's context (``report.replica_group.ray_train_replicas``)."""
    group = os.environ.get("REPLICA_GROUP_ID", "")
    if not os.environ.get("TORCHFT_LIGHTHOUSE") or (group and not group.isdigit()):
        return None
    if not group:
        from trainprobe.hooks.report.replica_group import ray_train_replicas

        return ray_train_replicas()
    return int(group), max(int(group) + 1, int(os.environ.get("NUM_REPLICA_GROUPS", "1") or 1))


@dataclass
class _LoopState:
    pending: bool = False  # a quorum was started for the step being trained
    total: int | None = None  # the last step to train (steps(n), or the Trainer's max)
    local: int = 0  # steps without a Manager
    first: bool = True  # no step committed yet by this process


def _optimizer_base() -> type:
    import torch

    return torch.optim.Optimizer


class _Wrapper:
    """What :class:`ReplicatedOptimizer` adds to the script's optimizer."""

    def __init__(self, optim: Any, manager: Any) -> None:
        # Like torchft's OptimizerWrapper: no Optimizer.__init__, everything is optim's.
        self.optim = optim
        self.manager = manager
        # One object for the mutable state: Lightning's LightningOptimizer copies an
        # optimizer's __dict__, and both copies must see the same quorum and counts.
        self._s = _LoopState()

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
            self._s.local += 1
            return self.optim.step(closure)
        # A closure (Lightning's: forward, zero_grad, backward) runs once, before the commit.
        loss = closure() if closure is not None else None
        self.start_step()  # a loop with no zero_grad and no forward before step
        self._s.pending = False
        if self.manager.should_commit():  # False: the quorum lost a replica, step discarded
            self.optim.step()
            if self._s.first:
                self._s.first = False
                if self.manager.current_step() == 1:  # step 0's sync: see sync_group
                    sync_group(self.optim)
        return loss

    # -- the replicated loop ------------------------------------------------------

    def start_step(self) -> None:
        """Start this step's quorum (once a step; not past the last step)."""
        if self.manager is None or self._s.pending:
            return
        if self._s.total is not None and self.manager.current_step() >= self._s.total:
            return  # the loop is over: a quorum now would wait for replicas that left
        self.manager.start_quorum()
        self._s.pending = True

    def steps(self, total: int) -> Iterator[int]:
        """The step being trained, 1-based, until ``total`` steps are committed."""
        self._s.total = total
        if self._s.first and self.manager is not None:
            # A group that (re)joins heals in its first quorum: its count becomes the
            # survivors'. Waited for once, here, so its first step is numbered as
            # theirs (the hook reports it) and not 1; later quorums overlap the forward.
            self.start_step()
            if self._s.pending:
                self.manager.wait_quorum()
        while (done := self.committed()) < total:
            yield done + 1

    def committed(self) -> int:
        """Steps committed so far (after a rejoin: the survivors' count)."""
        return self._s.local if self.manager is None else int(self.manager.current_step())

    def sampler(self, dataset: Any, **kwargs: Any) -> Any:
        """:func:`replica_sampler` of ``dataset``."""
        return replica_sampler(dataset, **kwargs)


def replica_sampler(dataset: Any, **kwargs: Any) -> Any:
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


#: Parameter types whose ranks hold different shards of a tensor.
_SHARDED = ("DTensor", "FlatParameter")


def sync_group(optim: Any) -> None:
    """Give every rank of this replica group its rank 0's parameters and optimizer state.

    torchft's step-0 sync (``init_sync``) picks a source replica *per group
    rank* (the ranks of one group heal from different replicas, to spread the
    load), and that step's quorum differs by rank too: in a group of K > 1 ranks, each rank
    ends step 0 with another replica's weights and another average of the
    gradients (other optimizer moments), which the group's DDP never
    reconciles (it averages gradients; its buffers it broadcasts itself).
    Called once, after the first commit of a job that starts at step 0, on
    every rank of the group together (the default process group). No-op
    for one rank."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    params = [p for group in optim.param_groups for p in group["params"]]
    if any(type(p).__name__ in _SHARDED for p in params):
        return  # the ranks hold different shards (FSDP): nothing to give
    tensors: list[Any] = []
    for group in optim.param_groups:
        for p in group["params"]:
            state = optim.state.get(p, {})
            tensors += [p, *(state[k] for k in sorted(state) if torch.is_tensor(state[k]))]
    with torch.no_grad():
        for t in tensors:
            dist.broadcast(t.data, src=0)


_CLASS: list[type] = []


def ReplicatedOptimizer(optim: Any, manager: Any) -> Any:
    """The script's optimizer, committing through ``manager`` (None: plain). An
    ``isinstance`` of ``torch.optim.Optimizer``, so LR schedulers take it."""
    if not _CLASS:
        _CLASS.append(type("ReplicatedOptimizer", (_Wrapper, _optimizer_base()), {}))
    return _CLASS[0](optim, manager)
