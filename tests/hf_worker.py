"""A tiny Hugging Face Trainer job on CPU with trainprobe's callback, for the tests.

Run under ``python -m torch.distributed.run --nproc-per-node 2``. The model is
a one-layer GPT-2 built from a config (nothing is downloaded), the data random
token ids. trainprobe's part is ``callbacks=[LivenessProbeCallback()]``.

Faults, on torchrun's first attempt only (``TORCHELASTIC_RESTART_COUNT=0``):
``--hang-rank R --hang-at S`` sleeps at the start of rank R's training_step
after S optimizer steps (before its backward: the peer waits in the
allreduce), or, with ``--hang-how stop``, SIGSTOPs itself there.
``--init-sleep ATTEMPT:RANK:S`` makes that rank of that attempt sleep S
seconds before ``TrainingArguments`` (which creates the process group);
``--setup-sleep ATTEMPT:RANK:S`` right after it, before the ``Trainer`` and
its callback exist (its peer goes on into its first step and waits).
``--eval-batch-s`` and ``--save-s`` make evaluation batches and rank 0's
checkpoint writes slow. ``--resume`` resumes from the last checkpoint in
``--output-dir`` (what a restarted attempt does). Each rank appends JSON
lines to ``--progress``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from trainprobe.hooks.transformers import LivenessProbeCallback

ARGS: argparse.Namespace
RANK = int(os.environ.get("RANK", "0"))
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def emit(event: str, **fields: Any) -> None:
    row = {"event": event, "rank": RANK, "attempt": ATTEMPT, "t": time.time(), **fields}
    with open(ARGS.progress, "a") as fh:
        fh.write(json.dumps(row) + "\n")


class RandomTokens(Dataset):
    def __init__(self, n: int, vocab: int = 64, length: int = 16) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def with_faults(base: type[Trainer]) -> type[Trainer]:
    class Faulty(base):  # type: ignore[valid-type,misc]
        def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if (RANK, ATTEMPT, self.state.global_step) == (ARGS.hang_rank, 0, ARGS.hang_at):
                emit("hang", step=self.state.global_step, pid=os.getpid())
                if ARGS.hang_how == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
                time.sleep(3600)
            time.sleep(ARGS.step_s)
            out = super().training_step(model, inputs, *args, **kwargs)
            emit("step", step=self.state.global_step + 1)
            return out

        def prediction_step(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(ARGS.eval_batch_s)
            return super().prediction_step(*args, **kwargs)

        def evaluate(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            out = super().evaluate(*args, **kwargs)
            emit("evaluation", seconds=time.monotonic() - t0)
            return out

        def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
            t0 = time.monotonic()
            if self.args.should_save:  # rank 0 writes, slowly; rank 1 moves on
                time.sleep(ARGS.save_s)
            super()._save_checkpoint(*args, **kwargs)
            emit("checkpoint", seconds=time.monotonic() - t0)

    return Faulty


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--progress", required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--trainer", choices=["trainer", "seq2seq"], default="trainer")
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--step-s", type=float, default=0.02)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--hang-how", choices=["sleep", "stop"], default="sleep")
    p.add_argument("--init-sleep", default="", help="ATTEMPT:RANK:SECONDS")
    p.add_argument("--setup-sleep", default="", help="ATTEMPT:RANK:SECONDS")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=2)
    p.add_argument("--eval-batch-s", type=float, default=0.0)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--save-s", type=float, default=0.0)
    ARGS = p.parse_args()
    if ARGS.init_sleep:
        attempt, rank, seconds = ARGS.init_sleep.split(":")
        if (int(attempt), int(rank)) == (ATTEMPT, RANK):
            emit("init_sleep", pid=os.getpid())
            time.sleep(float(seconds))
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=64,
        n_positions=16,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    batch = 4
    seq2seq = ARGS.trainer == "seq2seq"
    args = (Seq2SeqTrainingArguments if seq2seq else TrainingArguments)(
        output_dir=ARGS.output_dir,
        max_steps=ARGS.max_steps,
        per_device_train_batch_size=batch,
        per_device_eval_batch_size=batch,
        eval_strategy="steps" if ARGS.eval_every else "no",
        eval_steps=ARGS.eval_every or None,
        save_strategy="steps" if ARGS.save_every else "no",
        save_steps=ARGS.save_every or 500,
        logging_steps=1000,
        report_to="none",
        use_cpu=True,
        ddp_backend="gloo",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    if ARGS.setup_sleep:
        attempt, rank, seconds = ARGS.setup_sleep.split(":")
        if (int(attempt), int(rank)) == (ATTEMPT, RANK):
            emit("setup_sleep", pid=os.getpid())
            time.sleep(float(seconds))
    cls = with_faults(Seq2SeqTrainer if seq2seq else Trainer)
    trainer = cls(
        model=GPT2LMHeadModel(config),
        args=args,
        train_dataset=RandomTokens(4096),
        eval_dataset=RandomTokens(2 * batch * ARGS.eval_batches) if ARGS.eval_every else None,
        callbacks=[LivenessProbeCallback(interval_ms=100)],
    )
    resume = ARGS.resume and os.path.isdir(ARGS.output_dir)
    last = get_last_checkpoint(ARGS.output_dir) if resume else None
    resumed_from = int(last.rsplit("-", 1)[1]) if last else 0
    emit("start", pid=os.getpid(), resumed_from=resumed_from)
    trainer.train(resume_from_checkpoint=last)
    emit("done", step=trainer.state.global_step)


if __name__ == "__main__":
    main()
