"""A Hugging Face Trainer fit, replicated by ReplicatedCallback, for
tests/test_replicated_transformers.py.

Run under ``trainprobe run``: each replica group is one Trainer job of one CPU
rank; the model is a one-layer GPT-2 built from a config (nothing is
downloaded), the data random token ids. ``--hang-at S``: the rank of replica
group 1 sleeps in its training_step (before its backward: the peer waits in
the replicated allreduce) at the first step from committed step S on that both
groups train, once a job; group 0 then steps every ``--alone-s`` while it
trains alone, so the restarted group rejoins before the end. Appends JSON
lines to ``--progress``: the hang, each step (replica group, pid, committed
count, the Trainer's step), each evaluation and, at the end, the parameters.
``--eval-every``/``--save-every`` evaluate and save (each group in its own
``--output-dir/replica<group>``) every that many steps.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from trainprobe.hooks.replicated_transformers import ReplicatedCallback
from trainprobe.hooks.transformers import LivenessProbeCallback

ARGS: argparse.Namespace
GROUP = int(os.environ.get("REPLICA_GROUP_ID", "0"))
RANK = int(os.environ.get("RANK", "0"))  # in the group


def emit(event: str, **fields: Any) -> None:
    row = {"event": event, "rank": GROUP, "pid": os.getpid(), "t": time.time(), **fields}
    row["group_rank"] = RANK
    with open(ARGS.progress, "a") as fh:
        fh.write(json.dumps(row) + "\n")


class RandomTokens(Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, vocab: int = 64, length: int = 16) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Faulty(Trainer):  # type: ignore[misc]
    replicated: ReplicatedCallback

    def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        manager = self.replicated.manager
        committed = manager.current_step()
        both = manager.num_participants() >= 2  # not while it trains alone before its peer
        if (
            GROUP == 1
            and both
            and committed >= ARGS.hang_at >= 0
            and not os.path.exists(ARGS.marker)
        ):
            open(ARGS.marker, "w").close()
            emit("hang", committed=committed)
            time.sleep(3600)
        alone = GROUP == 0 and not both and os.path.exists(ARGS.marker)
        time.sleep(ARGS.alone_s if alone else ARGS.step_s)
        return super().training_step(model, inputs, *args, **kwargs)

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        out = super().evaluate(*args, **kwargs)
        emit("evaluation", step=self.state.global_step, loss=out.get("eval_loss"))
        return out


class Progress(LivenessProbeCallback):
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        super().on_step_end(args, state, control, **kwargs)
        emit("step", committed=Faulty.replicated.manager.current_step(), step=state.global_step)


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--progress", required=True)
    p.add_argument("--marker", required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--alone-s", type=float, default=0.5, help="group 0's step after the hang")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--accumulate", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--min-replicas", type=int, default=1, help="2: both groups train from step 0")
    ARGS = p.parse_args()
    config = GPT2Config(
        vocab_size=64,
        n_positions=16,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(GROUP)  # unlike on purpose: a joining replica fetches its peer's
    args = TrainingArguments(
        output_dir=f"{ARGS.output_dir}/replica{GROUP}",
        max_steps=ARGS.steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=ARGS.accumulate,
        learning_rate=1e-3,
        eval_strategy="steps" if ARGS.eval_every else "no",
        eval_steps=ARGS.eval_every or None,
        save_strategy="steps" if ARGS.save_every else "no",
        save_steps=ARGS.save_every or 500,
        logging_steps=1000,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Faulty.replicated = replicated = ReplicatedCallback(min_replicas=ARGS.min_replicas)
    # Progress after ReplicatedCallback: its step rows read the committed count.
    trainer = Faulty(
        model=GPT2LMHeadModel(config),
        args=args,
        train_dataset=RandomTokens(4096),
        eval_dataset=RandomTokens(16) if ARGS.eval_every else None,
        callbacks=[replicated, Progress(interval_ms=100)],
    )
    trainer.train()
    params = [float(v) for t in trainer.model.parameters() for v in t.detach().flatten()[:8]]
    emit("done", committed=replicated.manager.current_step(), params=params)


if __name__ == "__main__":
    main()
