"""A Lightning DDP fit, replicated by ReplicatedCallback, for tests/test_replicated_lightning.py.

Run under ``trainprobe run``: each replica group is one Lightning job of one
CPU rank. ``--stop-file``: once it holds a step count, every fit ends there.
``--stop-at S``: the rank of replica group 1 SIGSTOPs itself (``--fault
sleep``: sleeps in its training_step), once a job, at the first training step
from committed step S on that both replicas train.
Appends JSON lines to ``--progress``: each step (job-wide rank, pid,
committed count) and, at the end, the parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainprobe.hooks.lightning import LivenessProbeCallback, pl
from trainprobe.hooks.replicated_lightning import ReplicatedCallback
from trainprobe.hooks.replicated_optim import replica_sampler

ARGS: argparse.Namespace
GROUP = int(os.environ.get("REPLICA_GROUP_ID", "0"))


def emit(event: str, **fields: Any) -> None:
    row = {"event": event, "rank": GROUP, "pid": os.getpid(), "t": time.time(), **fields}
    with open(ARGS.progress, "a") as fh:
        fh.write(json.dumps(row) + "\n")


class Tiny(pl.LightningModule):
    def __init__(self, replicated: ReplicatedCallback) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.replicated = replicated

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        committed = self.replicated.manager.current_step()
        if os.path.exists(ARGS.stop_file):  # the test ends every fit at one committed step
            last = int(Path(ARGS.stop_file).read_text() or ARGS.steps)
            self.replicated.max_steps = self.replicated.optimizer._s.total = last
        # Once the other replica trains with this one (it then waits for this one).
        both = self.replicated.manager.num_participants() >= 2
        due = GROUP == 1 and both and committed >= ARGS.stop_at >= 0
        if due and not Path(ARGS.marker).exists():
            open(ARGS.marker, "w").close()
            emit("fault", committed=committed)
            if ARGS.fault == "sleep":
                time.sleep(3600)
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(ARGS.step_s)
        x, y = batch
        return (self.net(x) - y).pow(2).mean()

    def on_train_batch_end(self, *args: Any) -> None:
        emit("step", committed=self.replicated.manager.current_step())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--progress", required=True)
    p.add_argument("--marker", required=True)
    p.add_argument("--stop-file", required=True, help="once it holds N: end at N steps")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--stop-at", type=int, default=-1)
    p.add_argument("--fault", choices=("stop", "sleep"), default="stop")
    ARGS = p.parse_args()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(4096, 8, generator=g), torch.randn(4096, 1, generator=g))
    replicated = ReplicatedCallback()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        strategy="ddp",
        max_steps=ARGS.steps,
        use_distributed_sampler=False,
        callbacks=[replicated, LivenessProbeCallback()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Tiny(replicated)
    loader = DataLoader(data, batch_size=16, sampler=replica_sampler(data))
    trainer.fit(model, loader)
    params = [float(v) for t in model.parameters() for v in t.detach().flatten()[:8]]
    emit("done", committed=replicated.manager.current_step(), params=params)


if __name__ == "__main__":
    main()
