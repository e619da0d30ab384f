"""Lightning, replicated: one callback beside trainprobe's, under ``trainprobe run``.

    trainer = Trainer(
        strategy="ddp", max_steps=N, use_distributed_sampler=False,
        callbacks=[ReplicatedCallback(), LivenessProbeCallback()],
    )

    trainprobe run --replicas 2 -- python train.py

Each replica group is one Lightning DDP job (its ``WORLD_SIZE`` ranks); the
callback joins the groups with a torchft ``Manager``
(:func:`trainprobe.hooks.replica.replicate.make_manager`, same defaults). Where
Lightning lets it:

- ``setup`` (the process group exists, the model is not wrapped yet): the
  Manager, whose state is the LightningModule's and the optimizer's
  ``state_dict``; DDP is built with ``find_unused_parameters=True`` (its
  buckets never rebuilt: a rejoining replica's gradients must be laid out as
  its peers') and gets the cross-group comm hook once Lightning wraps it, on
  CPU too (Lightning itself registers comm hooks on CUDA only);
- ``on_fit_start``: the optimizer is wrapped (the step's quorum starts at the
  forward or ``zero_grad``; Lightning's closure runs, then the step commits or
  is discarded), and the LivenessProbeCallback's hook watches the Manager;
- the fit ends at ``max_steps`` *committed* steps (the Manager's count):
  Lightning's ``global_step`` also counts discarded steps, and a rejoining
  replica's starts again from 0, so Lightning's own limit is lifted and the
  callback stops the fit instead. ``trainer.global_step`` is then not the
  committed count: ``callback.manager.current_step()`` is;
- LivenessProbeCallback's hook is named by the job-wide rank (group index x
  group size + the trainer's rank; the trainer's alone would be 0 in every
  group). List ReplicatedCallback first, so that the hook's first Hello already
  carries it (listed after, the hook is made again under the right rank).

What it does not do: a data split across groups (Lightning's sampler shards
within a group only: pass ``use_distributed_sampler=False`` and a sampler from
:func:`trainprobe.hooks.replicated_optim.replica_sampler`), several optimizers,
epoch-based ends (``max_steps`` is required), and healing anything beyond the
module's and optimizer's state (LR schedulers, loops' counters). Without
``trainprobe run``'s environment it does nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from trainprobe.hooks import lightning as _lightning
from trainprobe.hooks.lightning import LivenessProbeCallback
from trainprobe.hooks.replica.replicate import comm_hook, make_manager
from trainprobe.hooks.replicated_optim import (
    MIN_REPLICAS,
    QUORUM_TIMEOUT_S,
    TIMEOUT_S,
    ReplicatedOptimizer,
    replica_env,
)

log = logging.getLogger("trainprobe.hooks")

__all__ = ["ReplicatedCallback"]


class ReplicatedCallback(_lightning.pl.Callback):  # type: ignore[name-defined]
    """Replicate a Lightning DDP fit across ``trainprobe run``'s replica groups."""

    def __init__(
        self,
        min_replicas: int = MIN_REPLICAS,
        timeout_s: float = TIMEOUT_S,
        quorum_timeout_s: float = QUORUM_TIMEOUT_S,
    ) -> None:
        self._kw = {
            "min_replicas": min_replicas,
            "timeout_s": timeout_s,
            "quorum_timeout_s": quorum_timeout_s,
        }
        self.manager: Any = None
        self.optimizer: Any = None
        self.max_steps = -1

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        env = replica_env()
        if stage != "fit" or self.manager is not None or env is None:
            return
        strategy = trainer.strategy
        if not hasattr(strategy, "_ddp_kwargs") or not hasattr(strategy, "configure_ddp"):
            raise ValueError("ReplicatedCallback needs Trainer(strategy='ddp')")
        if trainer.fit_loop.max_steps < 0:
            raise ValueError("ReplicatedCallback needs Trainer(max_steps=N): the committed steps")
        import torch.distributed as dist

        def state_dict() -> dict[str, Any]:
            return {"model": pl_module.state_dict(), "optim": self.optimizer.optim.state_dict()}

        def load_state_dict(sd: dict[str, Any]) -> None:
            pl_module.load_state_dict(sd["model"])
            self.optimizer.optim.load_state_dict(sd["optim"])

        self.manager = make_manager(state_dict, load_state_dict, **self._kw)  # type: ignore[arg-type]
        strategy._ddp_kwargs["find_unused_parameters"] = True
        size = dist.get_world_size()
        wrap = strategy.configure_ddp

        def configure_ddp() -> None:
            wrap()
            strategy.model.register_comm_hook(*comm_hook(self.manager, None, size))

        strategy.configure_ddp = configure_ddp
        self.max_steps = trainer.fit_loop.max_steps
        trainer.fit_loop.epoch_loop.max_steps = -1  # the Manager's count ends the fit
        self._job_wide_hooks(trainer, env[0] * size + trainer.global_rank, env[1] * size)

    def _job_wide_hooks(self, trainer: Any, rank: int, world_size: int) -> None:
        """LivenessProbeCallback names its hook by the trainer's rank, which is the
        rank inside a replica group: every group would claim rank 0. Give it the
        job-wide one (torchft's: group index x group size + group rank)."""
        from trainprobe.hooks.liveness import LivenessProbeHook

        for cb in trainer.callbacks:
            if not isinstance(cb, LivenessProbeCallback) or "rank" in cb.hook_kwargs:
                continue
            cb.hook_kwargs.update(rank=rank, world_size=world_size)
            if cb.hook is not None:  # its setup came first: name it again
                cb.hook.close()
                cb.hook = LivenessProbeHook(local_rank=trainer.local_rank, **cb.hook_kwargs)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.manager is None:
            return
        optimizers = trainer.strategy.optimizers
        if len(optimizers) != 1:
            raise ValueError("ReplicatedCallback takes one optimizer")
        self.optimizer = ReplicatedOptimizer(optimizers[0], self.manager)
        self.optimizer._s.total = self.max_steps
        trainer.strategy.optimizers = [self.optimizer]
        opt = self.optimizer
        trainer.strategy.model.register_forward_pre_hook(lambda *_: opt.start_step())
        groups = (replica_env() or (0, 1))[1]
        for cb in trainer.callbacks:
            if isinstance(cb, LivenessProbeCallback) and cb.hook is not None:
                cb.hook.watch_torchft(self.manager, num_replicas=groups)

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if self.manager is not None and self.manager.current_step() >= self.max_steps:
            trainer.should_stop = True
