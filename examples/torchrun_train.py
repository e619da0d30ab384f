"""Training under torchrun with trainprobe: checkpoint, get killed, resume.

    trainprobe-sidecar &                      # one per node
    torchrun --standalone --nproc-per-node 2 --max-restarts 3 \\
        examples/torchrun_train.py --ckpt-dir /tmp/ckpt

(With torch 2.3 add ``--monitor-interval 0.1``: its torchrun looks at its
ranks every 5 s, later ones every 0.1 s, so a killed rank's restart would
wait up to 5 s more.)

When a rank hangs, the sidecar names it and kills it (SIGTERM, then SIGKILL
after ``kill_grace_s``). torchrun's agent sees a failed worker, stops the
other ranks (they are blocked in a collective with the dead one) and, while
``--max-restarts`` allows, starts every rank again. Each attempt resumes from
the last checkpoint: the loop below is all a script needs for that.

The hook needs no arguments under torchrun: rank and world size come from
RANK/WORLD_SIZE, the job id from TORCHELASTIC_RUN_ID (the same for every
attempt), the sidecar from TRAINPROBE_TARGET or the per-user socket.

Fault injection, first attempt only (TORCHELASTIC_RESTART_COUNT=0), with the
flags of the other examples (examples/_faults.py): ``--hang-rank R --hang-at S``
makes rank R sleep inside step S (``--hang-how stop``: SIGSTOP itself there
instead).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _faults import fault_args
from torch import nn

from trainprobe.hooks import LivenessProbeHook


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ckpt-dir", required=True, help="where checkpoints are written and resumed")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every K steps")
    p.add_argument("--step-s", type=float, default=0.05, help="extra time per step")
    fault_args(p, "on the first attempt only", ("sleep", "stop"))
    p.add_argument("--progress", default="", help="append one JSON line per event here")
    return p.parse_args(argv)


def log_event(path: str, **event: object) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"t": time.time(), **event}) + "\n")


def load_checkpoint(ckpt: Path, model: nn.Module, opt: torch.optim.Optimizer) -> int:
    """The step to resume after (0 when starting fresh)."""
    if not ckpt.exists():
        return 0
    state = torch.load(ckpt, weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"])


def save_checkpoint(ckpt: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    # Written aside and renamed: a rank killed mid-save leaves the last good one.
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, ckpt)


def init_process_group(attempt: int) -> None:
    """``init_process_group`` on the env:// store, its keys prefixed by the attempt.

    torchrun keeps one store for every attempt; the process group's keys of
    the attempt before (each rank's gloo address) are still in it, and a
    restarted rank could read a dead peer's address before the live one is
    written ("Gloo connectFullMesh failed ... Connection refused", seen here
    with torch 2.13 in 4 of 5 restarts). A prefix per attempt keeps them apart.
    """
    store, rank, world = next(dist.rendezvous("env://"))
    dist.init_process_group(
        "nccl" if torch.cuda.is_available() else "gloo",
        store=dist.PrefixStore(f"attempt-{attempt}/", store),
        rank=rank,
        world_size=world,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    init_process_group(attempt)
    rank = dist.get_rank()
    ckpt = Path(args.ckpt_dir) / "latest.pt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = LivenessProbeHook()
    hook.watch_ddp(model)  # names the culprit rank when its peers wait in the allreduce
    # Every rank loads the same file; DDP's first forward would broadcast rank
    # 0's parameters anyway, but the step counter must agree everywhere.
    with hook.phase("restore"):
        start = load_checkpoint(ckpt, model.module, opt)
    log_event(
        args.progress,
        rank=rank,
        pid=os.getpid(),
        event="start",
        attempt=attempt,
        resumed_from=start,
    )

    gen = torch.Generator().manual_seed(rank * 100_003 + start)
    for step in range(start + 1, args.steps + 1):
        loss = model(torch.randn(16, 32, generator=gen)).pow(2).mean()
        if attempt == 0 and rank == args.hang_rank and step == args.hang_at:
            log_event(args.progress, rank=rank, pid=os.getpid(), event="hang", step=step)
            if args.hang_how == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(3600)  # the peers now wait in the gradient allreduce
        loss.backward()
        opt.step()
        opt.zero_grad()
        time.sleep(args.step_s)
        hook.on_step_end(step)
        log_event(args.progress, rank=rank, event="step", step=step, attempt=attempt)
        if step % args.ckpt_every == 0:
            # A declared phase: a slow save is never taken for a stall.
            with hook.phase("checkpoint"):
                if rank == 0:
                    save_checkpoint(ckpt, model.module, opt, step)
                dist.barrier()  # nobody runs ahead of a checkpoint it could need
            log_event(args.progress, rank=rank, event="checkpoint", step=step)
    log_event(args.progress, rank=rank, event="done", attempt=attempt, step=max(start, args.steps))
    hook.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
