"""Hugging Face Trainer, replicated: one callback beside trainprobe's, under ``trainprobe run``.

    trainer = Trainer(
        model, TrainingArguments(max_steps=N, ...), train_dataset=data,
        callbacks=[LivenessProbeCallback(), ReplicatedCallback()],
    )

    trainprobe run --replicas 2 [--nproc-per-replica K] -- python train.py

Each replica group is one Trainer job (its ``WORLD_SIZE`` ranks, plain DDP
inside by accelerate, or none for one rank); the callback joins the groups with
a torchft ``Manager`` (:func:`trainprobe.hooks.replica.replicate.make_manager`, same
defaults). Where the Trainer lets it:

- ``on_init_end``: the training set is split across the groups
  (:func:`replica_split`; accelerate then shards each group's part within the
  group), and trainprobe's callback is told the job-wide rank (group x K +
  rank), so the replicas' hooks do not all say rank 0;
- ``on_train_begin`` (accelerate has wrapped the model and the optimizer, the
  LR scheduler exists): the Manager, whose state is the model's, the
  optimizer's and the LR scheduler's ``state_dict``, what a rejoining replica
  fetches from a live peer; the optimizer inside accelerate's is wrapped
  (:func:`~trainprobe.hooks.replicated_optim.ReplicatedOptimizer`: the step
  commits or is discarded);
- ``on_step_begin``: the step's quorum starts (before the micro-batches);
- the gradients are averaged across the groups once an optimizer step, after
  the last micro-batch's backward (the group's own DDP has averaged them
  inside the group) and *before* they are clipped or their norm logged: the
  Trainer asks accelerate's ``clip_grad_norm_`` for both, which the callback
  wraps, and ``on_pre_optimizer_step`` averages where it was not asked. Flat
  allreduces of at most ``BUCKET_BYTES``, not overlapped with the backward
  (a comm hook would be, but it would depend on the DDP accelerate builds:
  its buckets, ``no_sync``, or no DDP at all);
- ``state.global_step`` is the Manager's committed count, so logging,
  evaluation, saving and ``max_steps`` count committed steps, and a rejoining
  replica continues at its peers' step; the fit ends at ``max_steps``. A
  discarded step is marked skipped for accelerate (as an fp16 overflow is), so
  the Trainer does not move the LR scheduler;
- groups of K > 1 ranks that start together at step 0 are made alike after
  the first commit by the optimizer wrapper
  (:func:`~trainprobe.hooks.replicated_optim.sync_group`).

What it does not do: DeepSpeed, FSDP, fp16 loss scaling, several optimizers,
an ``IterableDataset`` (not split: split it yourself by ``REPLICA_GROUP_ID``),
and healing beyond the model, optimizer and scheduler (the data order, RNG
states). A trainable parameter with no gradient gets a zero one (the groups'
buffers must match). Every group saves its own checkpoints: give each its own
``output_dir`` (``REPLICA_GROUP_ID`` is set). The data must last
``max_steps`` plus the steps discarded while a replica was lost (the Trainer
stops at the end of its epochs). Without ``trainprobe run``'s environment it
does nothing.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from trainprobe.hooks.replica.replicate import make_manager
from trainprobe.hooks.replicated_optim import (
    MIN_REPLICAS,
    QUORUM_TIMEOUT_S,
    TIMEOUT_S,
    ReplicatedOptimizer,
    replica_env,
)
from trainprobe.hooks.torchft import ft_comm_hook
from trainprobe.hooks.transformers import LivenessProbeCallback, calling_trainer

log = logging.getLogger("trainprobe.hooks")

__all__ = ["ReplicatedCallback", "average_gradients", "replica_split"]

#: Gradients are averaged in flat buffers of at most this many bytes (bounded memory).
BUCKET_BYTES = 64 << 20


def replica_split(dataset: Any) -> Any:
    """This replica group's share of a map-style ``dataset`` (every N-th example
    from the group's index on), or ``dataset`` itself outside ``trainprobe run``."""
    env = replica_env()
    if env is None or env[1] < 2:
        return dataset
    from torch.utils.data import Subset

    group, groups = env
    return Subset(dataset, range(group, len(dataset), groups))


class _Bucket:
    """What :func:`ft_comm_hook` reads of a DDP bucket: its flat buffer."""

    def __init__(self, buf: Any) -> None:
        self._buf = buf

    def buffer(self) -> Any:
        return self._buf


def average_gradients(manager: Any, params: list[Any]) -> None:
    """Average ``params``' gradients across the quorum's replica groups (in place).

    A discarded step (the Manager errored) leaves them as they are: it is not committed."""
    import torch
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    buckets: dict[tuple[Any, Any], list[list[Any]]] = {}
    filled: dict[tuple[Any, Any], int] = {}
    for g in grads:
        key = (g.device, g.dtype)
        runs = buckets.setdefault(key, [[]])
        if runs[-1] and filled.get(key, 0) + g.nbytes > BUCKET_BYTES:
            runs.append([])
            filled[key] = 0
        runs[-1].append(g)
        filled[key] = filled.get(key, 0) + g.nbytes
    for runs in buckets.values():
        for run in runs:
            flat = _flatten_dense_tensors(run)
            fut = ft_comm_hook(manager, _Bucket(flat))  # type: ignore[no-untyped-call]
            fut.wait()  # ft_comm_hook marked the wait as torchft's allreduce
            for g, avg in zip(run, _unflatten_dense_tensors(flat, run), strict=True):
                g.copy_(avg)


class ReplicatedCallback(TrainerCallback):
    """Replicate a Trainer's fit across ``trainprobe run``'s replica groups."""

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
        self._trainer: Any = None
        self._params: list[Any] = []
        self._averaged = True
        self._watched = False
        self._committed = 0

    # -- set-up ------------------------------------------------------------------

    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        env = replica_env()
        trainer = calling_trainer()
        if env is None or trainer is None:
            return
        from torch.utils.data import IterableDataset

        data = getattr(trainer, "train_dataset", None)
        if data is not None and hasattr(data, "__len__") and not isinstance(data, IterableDataset):
            trainer.train_dataset = replica_split(data)
        self._name_ranks(trainer, args, env)

    @staticmethod
    def _name_ranks(trainer: Any, args: TrainingArguments, env: tuple[int, int]) -> None:
        """trainprobe's callbacks name their hook from the TrainingArguments (the
        group's rank 0..K-1): give them the job-wide rank torchft also uses."""
        size = max(1, int(args.world_size))
        ident = {"rank": env[0] * size + int(args.process_index), "world_size": env[1] * size}
        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, LivenessProbeCallback):
                cb.hook_kwargs = {**ident, **cb.hook_kwargs}

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        env = replica_env()
        if env is None or self.manager is not None:
            return
        trainer = calling_trainer()
        if trainer is None:
            raise RuntimeError("ReplicatedCallback: the Trainer was not found on the stack")
        if args.max_steps <= 0:
            raise ValueError("ReplicatedCallback needs TrainingArguments(max_steps=N)")
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
            raise ValueError("ReplicatedCallback replicates DDP or single-rank groups only")
        if not hasattr(trainer.optimizer, "optimizer"):
            raise ValueError("ReplicatedCallback needs the optimizer accelerate prepared")
        accelerated = trainer.optimizer
        model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
        raw = accelerated.optimizer

        def state_dict() -> dict[str, Any]:
            lr = trainer.lr_scheduler
            return {
                "model": model.state_dict(),
                "optim": raw.state_dict(),
                "lr": lr.state_dict() if lr is not None else None,
            }

        def load_state_dict(sd: dict[str, Any]) -> None:
            model.load_state_dict(sd["model"])
            raw.load_state_dict(sd["optim"])
            if sd.get("lr") is not None and trainer.lr_scheduler is not None:
                trainer.lr_scheduler.load_state_dict(sd["lr"])

        self.manager = make_manager(state_dict, load_state_dict, **self._kw)  # type: ignore[arg-type]
        self.optimizer = ReplicatedOptimizer(raw, self.manager)
        self.optimizer._s.total = args.max_steps  # no quorum past the last step
        accelerated.optimizer = self.optimizer
        self._params = [p for g in raw.param_groups for p in g["params"] if p.requires_grad]
        self._trainer = trainer
        accel = trainer.accelerator
        clip = accel.clip_grad_norm_

        @functools.wraps(clip)
        def averaged_then_clipped(*a: Any, **k: Any) -> Any:
            self._average()
            return clip(*a, **k)

        accel.clip_grad_norm_ = averaged_then_clipped

    def _average(self) -> None:
        if not self._averaged:
            self._averaged = True
            average_gradients(self.manager, self._params)

    def _watch(self, env: tuple[int, int]) -> None:
        self._watched = True
        for cb in self._trainer.callback_handler.callbacks:
            if isinstance(cb, LivenessProbeCallback) and cb.hook is not None:
                cb.hook.watch_torchft(self.manager, num_replicas=env[1])

    # -- every step --------------------------------------------------------------

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.manager is None:
            return
        if not self._watched:  # trainprobe's callback made its hook in on_train_begin
            self._watch(replica_env() or (0, 1))
        self._averaged = False
        self.optimizer.start_step()

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.manager is not None:
            self._average()  # a Trainer that neither clipped nor took the norm

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.manager is None:
            return
        committed = int(self.manager.current_step())
        accelerated = self._trainer.optimizer
        if getattr(accelerated, "scaler", None) is None and hasattr(accelerated, "_is_overflow"):
            # accelerate's mark of a skipped step (else only its loss scaler's): the
            # Trainer then leaves the LR scheduler alone, as for an overflow, so a
            # discarded step does not move the schedule.
            accelerated._is_overflow = committed <= self._committed
        self._committed = committed
        # The Trainer adds 1 next: its step count becomes the committed one.
        state.global_step = committed - 1

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> TrainerControl | None:
        if self.manager is None:
            return None
        state.global_step = int(self.manager.current_step())
        if state.global_step >= args.max_steps:
            control.should_training_stop = True
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self._trainer is not None:
            self._trainer.accelerator.__dict__.pop("clip_grad_norm_", None)
