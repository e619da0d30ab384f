"""A tiny Lightning DDP job on CPU with trainprobe's callback, for the tests.

Run as a plain script: ``Trainer(accelerator="cpu", devices=2,
strategy="ddp")`` starts rank 1 itself by running this script again.
Everything trainprobe needs comes from the environment (TRAINPROBE_TARGET,
TRAINPROBE_JOB_ID) and from the one line ``callbacks=[LivenessProbeCallback()]``.

Each rank appends JSON lines to ``--progress``: its steps and how long
validation and checkpoint writes took.
"""

from __future__ import annotations

import argparse
import json
import os
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


def emit(event: str, **fields: Any) -> None:
    # Lightning sets LOCAL_RANK for the ranks it starts (one node here: the global rank).
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    row = {"event": event, "rank": rank, "t": time.time(), **fields}
    with open(ARGS.progress, "a") as fh:
        fh.write(json.dumps(row) + "\n")


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.val_started = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_rank == ARGS.hang_rank and self.global_step == ARGS.hang_at:
            emit("hang", step=self.global_step)
            time.sleep(3600)  # before the backward: the peer waits in the allreduce
        time.sleep(ARGS.step_s)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

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
    p.add_argument("--val-every", type=int, default=0, help="validate every N steps (0: never)")
    p.add_argument("--val-batches", type=int, default=2)
    p.add_argument("--val-batch-s", type=float, default=0.0)
    p.add_argument("--sanity-steps", type=int, default=0)
    p.add_argument("--ckpt-every", type=int, default=0, help="checkpoint every N steps (0: never)")
    p.add_argument("--ckpt-s", type=float, default=0.0)
    ARGS = p.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
    callbacks: list[pl.Callback] = [LivenessProbeCallback(interval_ms=100)]
    if ARGS.ckpt_every:
        callbacks.append(
            ModelCheckpoint(
                dirpath=Path(ARGS.workdir) / "ckpt",
                every_n_train_steps=ARGS.ckpt_every,
                save_top_k=-1,
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
    trainer.fit(
        Tiny(),
        DataLoader(data, batch_size=8),
        DataLoader(data, batch_size=8) if ARGS.val_every else None,
    )
    emit("done")


if __name__ == "__main__":
    main()
