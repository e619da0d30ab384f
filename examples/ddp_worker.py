"""A small DDP training process with trainprobe's hook and fault injection.

Used by the demo, the tests and the benchmarks. Launch one process per rank
with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as torchrun does);
it trains a tiny MLP on CPU over gloo and reports to the sidecar named by
TRAINPROBE_TARGET.

Faults (all optional):
  --hang-rank R --hang-at S --hang-mode sleep   rank R sleeps inside step S,
                                                 before its backward: its peers
                                                 block in the gradient allreduce
  --hang-mode stop                               rank R SIGSTOPs itself at step S
  --hang-mode exit                               rank R exits abruptly (os._exit)
  --hang-mode spin                               rank R busy-loops holding the GIL
  --ckpt-every K --ckpt-s T [--ckpt-rank R]      a declared checkpoint phase of
                                                 T seconds every K steps (all
                                                 ranks, or only rank R)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from trainprobe.hooks import LivenessProbeHook


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-s", type=float, default=0.05, help="extra sleep per step")
    p.add_argument("--interval-ms", type=int, default=200)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--hang-mode", choices=["sleep", "stop", "exit", "spin"], default="sleep")
    p.add_argument("--ckpt-every", type=int, default=0)
    p.add_argument("--ckpt-s", type=float, default=0.0)
    p.add_argument("--ckpt-rank", type=int, default=-1)
    p.add_argument("--ckpt-timeout-s", type=float, default=900.0)
    p.add_argument("--progress", default="", help="append one JSON line per event here")
    p.add_argument("--no-hook", action="store_true", help="train without trainprobe")
    return p.parse_args(argv)


def log_event(path: str, **event: object) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"t": time.time(), **event}) + "\n")


def hang(mode: str) -> None:
    if mode == "sleep":
        time.sleep(3600)
    elif mode == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif mode == "exit":
        os._exit(3)
    elif mode == "spin":
        while True:
            pass


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = None if args.no_hook else LivenessProbeHook(interval_ms=args.interval_ms)
    log_event(args.progress, rank=rank, pid=os.getpid(), event="start", world=world)
    gen = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        x = torch.randn(16, 32, generator=gen)
        loss = model(x).pow(2).mean()
        if rank == args.hang_rank and step == args.hang_at:
            log_event(
                args.progress,
                rank=rank,
                pid=os.getpid(),
                event="hang",
                step=step,
                mode=args.hang_mode,
            )
            hang(args.hang_mode)
        loss.backward()  # gloo allreduce of the gradients: peers of a hung rank block here
        opt.step()
        opt.zero_grad()
        time.sleep(args.step_s)
        if hook is not None:
            hook.on_step_end(step)
        log_event(args.progress, rank=rank, event="step", step=step)
        if args.ckpt_every and step % args.ckpt_every == 0 and args.ckpt_rank in (-1, rank):
            if hook is not None:
                with hook.phase("checkpoint", timeout_s=args.ckpt_timeout_s):
                    time.sleep(args.ckpt_s)
            else:
                time.sleep(args.ckpt_s)
            log_event(args.progress, rank=rank, event="checkpoint", step=step)
    dist.barrier()
    log_event(args.progress, rank=rank, event="done")
    if hook is not None:
        hook.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
