"""A tiny Lightning DDP job on CPU with trainprobe's callback, for the tests.

Run as a plain script: ``Trainer(accelerator="cpu", devices=2,
strategy="ddp")`` starts rank 1 itself by running this script again.
Everything trainprobe needs comes from the environment (TRAINPROBE_TARGET,
TRAINPROBE_JOB_ID) and from the one line ``callbacks=[LivenessProbeCallback()]``.

Under torchrun (``--nproc-per-node 2``) Lightning takes the ranks torchrun
started instead. Faults, on torchrun's first attempt only
(``TORCHELASTIC_RESTART_COUNT=0``): ``--hang-rank R --hang-at S`` sleeps in
rank R's training_step at global step S, or with ``--hang-how stop``
SIGSTOPs itself there. ``--init-sleep ATTEMPT:RANK:S`` makes that rank of
that attempt sleep S seconds before ``fit`` (which creates the process
group); ``--start-sleep HOOK:RANK:S`` makes that rank sleep S seconds in the
module's ``setup`` or ``on_fit_start`` (after the process group and the
callback's hook, before the first batch), or in ``prepare_data`` (rank 0;
before the callback's hook). ``--resume`` fits from
``last.ckpt`` when one exists (what a restarted attempt does).

Each rank appends JSON lines to ``--progress``: its steps and how long
validation and checkpoint writes took.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.utils.data import DataLoader, TensorDataset

from trainprobe.hooks.lightning import LivenessProbeCallback

ARGS: argparse.Namespace
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def emit(event: str, **fields: Any) -> None:
    # Lightning sets LOCAL_RANK for the ranks it starts (one node here: the global rank).
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    row = {"event": event, "rank": rank, "attempt": ATTEMPT, "t": time.time(), **fields}
    with open(ARGS.progress, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def start_sleep(where: str, rank: int) -> None:
    """``--start-sleep``, on the first attempt only."""
    if not ARGS.start_sleep or ATTEMPT:
        return
    hook, sleeper, seconds = ARGS.start_sleep.split(":")
    if (hook, int(sleeper)) == (where, rank):
        emit("start_sleep", where=where, pid=os.getpid(), seconds=float(seconds))
        time.sleep(float(seconds))


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.val_started = 0.0

    def prepare_data(self) -> None:
        # Local rank 0 alone; its peers wait in the strategy's pre_setup barrier.
        start_sleep("prepare_data", self.trainer.global_rank)

    def setup(self, stage: str) -> None:
        start_sleep("setup", self.global_rank)

    def on_fit_start(self) -> None:
        start_sleep("on_fit_start", self.global_rank)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if (self.global_rank, ATTEMPT, self.global_step) == (ARGS.hang_rank, 0, ARGS.hang_at):
            emit("hang", step=self.global_step, pid=os.getpid())
            if ARGS.hang_how == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(3600)  # before the backward: the peer waits in the allreduce
        time.sleep(ARGS.step_s)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_train_start(self) -> None:
        emit("start", pid=os.getpid(), resumed_from=self.global_step)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        emit("step", step=self.global_step)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(ARGS.val_batch_s)
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def on_validation_epoch_start(self) -> None:
        self.val_started = time.monotonic()

    def on_validation_epoch_end(self) -> None:
        sanity = self.trainer.sanity_checking
        emit("validation", seconds=time.monotonic() - self.val_started, sanity=sanity)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class SlowCheckpointIO(TorchCheckpointIO):
    """Storage that takes ``--ckpt-s`` per checkpoint (rank 0 writes; rank 1 waits)."""

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        t0 = time.monotonic()
        time.sleep(ARGS.ckpt_s)
        super().save_checkpoint(checkpoint, path, storage_options)
        emit("checkpoint", seconds=time.monotonic() - t0, path=str(path))


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--progress", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--step-s", type=float, default=0.02)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--hang-how", choices=["sleep", "stop"], default="sleep")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--init-sleep", default="", help="ATTEMPT:RANK:SECONDS before fit")
    p.add_argument(
        "--start-sleep", default="", help="HOOK:RANK:SECONDS in setup|on_fit_start|prepare_data"
    )
    p.add_argument("--val-every", type=int, default=0, help="validate every N steps (0: never)")
    p.add_argument("--val-batches", type=int, default=2)
    p.add_argument("--val-batch-s", type=float, default=0.0)
    p.add_argument("--sanity-steps", type=int, default=0)
    p.add_argument("--ckpt-every", type=int, default=0, help="checkpoint every N steps (0: never)")
    p.add_argument("--ckpt-s", type=float, default=0.0)
    ARGS = p.parse_args()
    if ARGS.init_sleep:  # before fit, which creates the process group
        attempt, rank, seconds = ARGS.init_sleep.split(":")
        if (int(attempt), int(rank)) == (ATTEMPT, int(os.environ.get("RANK", "0"))):
            emit("init_sleep", pid=os.getpid())
            time.sleep(float(seconds))
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
    callbacks: list[pl.Callback] = [LivenessProbeCallback(interval_ms=100)]
    if ARGS.ckpt_every:
        callbacks.append(
            ModelCheckpoint(
                dirpath=Path(ARGS.workdir) / "ckpt",
                every_n_train_steps=ARGS.ckpt_every,
                save_top_k=-1,
                save_last=ARGS.resume,
            )
        )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=ARGS.max_steps,
        callbacks=callbacks,
        plugins=[SlowCheckpointIO()],
        enable_checkpointing=bool(ARGS.ckpt_every),
        limit_val_batches=ARGS.val_batches if ARGS.val_every else 0,
        val_check_interval=ARGS.val_every or None,
        check_val_every_n_epoch=None if ARGS.val_every else 1,
        num_sanity_val_steps=ARGS.sanity_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=ARGS.workdir,
    )
    last = Path(ARGS.workdir) / "ckpt" / "last.ckpt"
    trainer.fit(
        Tiny(),
        DataLoader(data, batch_size=8),
        DataLoader(data, batch_size=8) if ARGS.val_every else None,
        ckpt_path=str(last) if ARGS.resume and last.exists() else None,
    )
    emit("done", step=trainer.global_step)


if __name__ == "__main__":
    main()
