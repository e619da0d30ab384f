"""Lightning and the Hugging Face Trainer inside Ray Train, with trainprobe's callbacks.

Used by tests/test_ray_train_frameworks.py; Ray's workers import it from
tests/workers/ (on their PYTHONPATH). Each train function is what Ray's own
guides write, plus trainprobe's callback:

- Lightning: ``RayDDPStrategy``, ``RayLightningEnvironment``,
  ``prepare_trainer`` and ``RayTrainReportCallback``, which saves and reports
  a checkpoint at each epoch's end (an epoch is ``ckpt_every`` steps here);
  a restarted group fits from ``checkpoint.ckpt`` in ``ray.train.get_checkpoint()``;
- Hugging Face: a one-layer GPT-2 built from a config (nothing is
  downloaded), ``prepare_trainer`` and ``RayTrainReportCallback``, which
  reports each checkpoint the Trainer saves (every ``ckpt_every`` steps); a
  restarted group trains with ``resume_from_checkpoint`` at ``checkpoint`` in
  ``ray.train.get_checkpoint()``.

Fault, only in an attempt that resumed no checkpoint: as optimizer step
``hang_at`` + 1 begins, every rank waits until Ray Train has registered the
last checkpoint (its controller's ``checkpoint_manager_snapshot.json``, path
in ``config["ray_checkpoints"]``), then rank ``hang_rank`` SIGSTOPs itself
(before its backward: its peer waits in the gradient allreduce). Events, one JSON line each in
``config["progress"]`` (examples/ray_train_job.py's ``log_event``): ``start``
(rank, pid, restored_step), ``step`` and ``done`` (rank, step, restored),
``hang`` (rank, pid, step).

Second fault, with ``config["start_hang"]`` set (examples/ray_train_job.py's
``hang_at_start``): rank ``hang_rank`` of the first group that resumed a
checkpoint sleeps where its training starts (Lightning's ``on_train_start``,
the Trainer's ``on_train_begin``: after trainprobe's callback made its hook
and watched the DDP model, before the first step), while its peer goes on
into the first step's gradient allreduce; event ``start_hang`` (rank, pid).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from typing import Any

from ray_train_job import hang_at_start, log_event

__all__ = ["DEFAULTS", "hf_train_func", "lightning_train_func"]

DEFAULTS: dict[str, Any] = {
    "steps": 20,
    "ckpt_every": 5,
    "hang_rank": -1,
    "hang_at": -1,
    # Ray Train's checkpoint_manager_snapshot.json (storage_path/name/): the
    # fault waits, at most settle_max_s, until it holds the last checkpoint.
    "ray_checkpoints": "",
    "settle_max_s": 60.0,
    "progress": "",
    # A file path: ray_train_job's second fault, once, in a restarted group's start-up.
    "start_hang": "",
}
BATCH = 4


class _Fault:
    """The fault and the events, shared by both stacks' callbacks."""

    def __init__(self, config: dict[str, Any]) -> None:
        import ray.train

        self.cfg = {**DEFAULTS, **config}
        self.rank = ray.train.get_context().get_world_rank()
        self.restored = -1

    def start(self, step: int) -> None:
        self.restored = step
        progress = self.cfg["progress"]
        log_event(progress, event="start", rank=self.rank, pid=os.getpid(), restored_step=step)
        hang_at_start(self.cfg, self.rank, step)

    def step_begins(self, done: int) -> None:
        """``done`` optimizer steps are behind this one."""
        cfg = self.cfg
        if (self.restored, done) != (0, cfg["hang_at"]):
            return
        # Every rank, between two steps (no collective in flight): Ray Train
        # registers a checkpoint once its controller has polled every
        # worker's report (every 2 s); a worker stopped before that loses it.
        want = done // cfg["ckpt_every"] * cfg["ckpt_every"] if cfg["ray_checkpoints"] else 0
        deadline = time.monotonic() + cfg["settle_max_s"]
        while _registered_step(cfg["ray_checkpoints"]) < want and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.rank == cfg["hang_rank"]:
            log_event(cfg["progress"], event="hang", rank=self.rank, pid=os.getpid(), step=done)
            os.kill(os.getpid(), signal.SIGSTOP)

    def step_ended(self, step: int) -> None:
        progress = self.cfg["progress"]
        log_event(progress, event="step", rank=self.rank, step=step, restored=self.restored)

    def done(self, step: int) -> None:
        progress = self.cfg["progress"]
        log_event(progress, event="done", rank=self.rank, step=step, restored=self.restored)


def _registered_step(snapshot: str) -> int:
    """The highest step among the checkpoints Ray Train registered (0: none, or unreadable)."""
    try:
        with open(snapshot) as fh:
            results = json.load(fh)["checkpoint_results"]
        return max((int(r["metrics"].get("step", 0)) for r in results), default=0)
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def lightning_train_func(config: dict[str, Any]) -> None:
    import lightning.pytorch as pl
    import ray.train
    import torch
    from ray.train.lightning import (
        RayDDPStrategy,
        RayLightningEnvironment,
        RayTrainReportCallback,
        prepare_trainer,
    )
    from torch.utils.data import DataLoader, TensorDataset

    from trainprobe.hooks.lightning import LivenessProbeCallback

    fault = _Fault(config)

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
            )

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Events(pl.Callback):
        def on_train_start(self, trainer: pl.Trainer, module: Any) -> None:
            fault.start(trainer.global_step)

        def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
            fault.step_begins(trainer.global_step)

        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            fault.step_ended(trainer.global_step)

    cfg = fault.cfg
    torch.manual_seed(0)
    world = ray.train.get_context().get_world_size()
    # One epoch, hence one of RayTrainReportCallback's checkpoints, every ckpt_every steps.
    n = world * BATCH * cfg["ckpt_every"]
    data = TensorDataset(torch.randn(n, 8), torch.randn(n, 1))
    trainer = pl.Trainer(
        max_steps=cfg["steps"],
        accelerator="cpu",
        devices="auto",
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback(), LivenessProbeCallback(), Events()],
        enable_checkpointing=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tempfile.mkdtemp(prefix="tp-pl-"),
    )
    trainer = prepare_trainer(trainer)
    loader = DataLoader(data, batch_size=BATCH)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        trainer.fit(Tiny(), loader)
    else:
        with checkpoint.as_directory() as d:
            ckpt = os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME)
            trainer.fit(Tiny(), loader, ckpt_path=ckpt)
    fault.done(trainer.global_step)


def hf_train_func(config: dict[str, Any]) -> None:
    import ray.train
    import torch
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
    from torch.utils.data import Dataset
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from trainprobe.hooks.transformers import LivenessProbeCallback

    fault = _Fault(config)

    class RandomTokens(Dataset):
        def __init__(self, n: int, vocab: int = 64, length: int = 16) -> None:
            gen = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, vocab, (n, length), generator=gen)

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    class Events(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            fault.start(state.global_step)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            fault.step_begins(state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            fault.step_ended(state.global_step)

    cfg = fault.cfg
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    )
    args = TrainingArguments(
        # Each rank its own: the report copies the newest checkpoint here, and
        # every rank writes its own part of it (its RNG state).
        output_dir=tempfile.mkdtemp(prefix="tp-hf-"),
        max_steps=cfg["steps"],
        per_device_train_batch_size=BATCH,
        save_strategy="steps",
        save_steps=cfg["ckpt_every"],
        logging_steps=cfg["ckpt_every"],
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=RandomTokens(4 * BATCH * cfg["steps"]),
        callbacks=[RayTrainReportCallback(), LivenessProbeCallback(), Events()],
    )
    trainer = prepare_trainer(trainer)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        trainer.train()
    else:
        with checkpoint.as_directory() as d:
            ckpt = os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME)
            trainer.train(resume_from_checkpoint=ckpt)
    fault.done(trainer.state.global_step)
