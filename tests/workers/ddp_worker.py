"""A small DDP training process with trainprobe's hook and fault injection.

Used by the demo, the tests and the benchmarks. Launch one process per rank
with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as torchrun does);
it trains a tiny MLP on CPU over gloo and reports to the sidecar named by
TRAINPROBE_TARGET.

Faults (all optional):
  --hang-rank R --hang-at S --hang-how sleep    rank R sleeps inside step S,
                                                 before its backward: its peers
                                                 block in the gradient allreduce
  --hang-how stop                                rank R SIGSTOPs itself at step S
  --hang-how exit                                rank R exits abruptly (os._exit)
  --hang-how spin                                rank R busy-loops in Python (it
                                                 still lets other threads run)
  --hang-how skip                                rank R skips step S's gradient
                                                 allreduce and blocks in a recv
                                                 no peer answers: its peers
                                                 block in the allreduce it missed
  --hang-how gil                                 rank R blocks in a C call that holds
                                                 the GIL (read() on an empty pipe through
                                                 ctypes.PyDLL): no thread of the process
                                                 runs Python, as with a C extension that
                                                 blocks without releasing the GIL
  --ckpt-every K --ckpt-s T [--ckpt-rank R]      a declared checkpoint phase of
                                                 T seconds every K steps (all
                                                 ranks, or only rank R)
  --delay-backward-rank R --delay-backward-s S   rank R sleeps S seconds before
    [--delay-backward-at STEP]                   its backward at STEP (default 10):
                                                 its peers wait in the allreduce

  --mismatch-rank R --mismatch-at S              at step S every rank all-reduces a
                                                 metric, but rank R all-gathers it: the
                                                 collectives never match, all wait
  --after-error sleep                            a rank whose collective fails (its peer
                                                 was killed) sleeps instead of exiting,
                                                 as ranks stuck in NCCL would

Gradient sync (trainprobe's comm hook):
  --watch-ddp                                    hook.watch_ddp(model)
  --user-comm-hook allreduce|fp16                a user comm hook (PyTorch's
                                                 allreduce_hook/fp16_compress_hook):
                                                 given to watch_ddp, or registered
                                                 directly without --watch-ddp
  --register-hook-first                          register the user hook on DDP
                                                 before calling watch_ddp
  --user-collective-every K                      all-reduce a metric inside
                                                 hook.collective("metrics") every K steps
  --save-grads PREFIX --save-grads-at STEP       save the gradients after STEP's
                                                 backward to PREFIX-rank<R>.pt

Baselines for the benchmarks (all optional):
  --pg-timeout-s T          the gloo process group's timeout (torch default 30 min)
  --nvrx                    send an NVRx RankMonitorClient heartbeat every step
                            (run under ft_launcher); --nvrx-calc-at N: call its
                            calculate_and_set_hb_timeouts() after step N
  --start-file PATH         after start-up, wait for PATH to exist before step 1
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from trainprobe.hooks import LivenessProbeHook


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-s", type=float, default=0.05, help="extra sleep per step")
    p.add_argument("--interval-ms", type=int, default=200)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument(
        "--hang-how", choices=["sleep", "stop", "exit", "spin", "skip", "gil"], default="sleep"
    )
    p.add_argument("--ckpt-every", type=int, default=0)
    p.add_argument("--ckpt-s", type=float, default=0.0)
    p.add_argument("--ckpt-rank", type=int, default=-1)
    p.add_argument("--ckpt-timeout-s", type=float, default=900.0)
    p.add_argument("--progress", default="", help="append one JSON line per event here")
    p.add_argument("--no-hook", action="store_true", help="train without trainprobe")
    p.add_argument("--delay-backward-rank", type=int, default=-1)
    p.add_argument("--delay-backward-s", type=float, default=0.0)
    p.add_argument("--delay-backward-at", type=int, default=10)
    p.add_argument("--watch-ddp", action="store_true")
    p.add_argument("--user-comm-hook", choices=["", "allreduce", "fp16"], default="")
    p.add_argument("--register-hook-first", action="store_true")
    p.add_argument("--user-collective-every", type=int, default=0)
    p.add_argument("--save-grads", default="")
    p.add_argument("--save-grads-at", type=int, default=5)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--pg-timeout-s", type=float, default=0.0, help="gloo timeout (0: default)")
    p.add_argument("--nvrx", action="store_true", help="NVRx heartbeats (under ft_launcher)")
    p.add_argument("--nvrx-calc-at", type=int, default=20)
    p.add_argument("--start-file", default="", help="wait for this file before step 1")
    p.add_argument("--mismatch-rank", type=int, default=-1)
    p.add_argument("--mismatch-at", type=int, default=-1)
    p.add_argument("--after-error", choices=["exit", "sleep"], default="exit")
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
    elif mode == "gil":
        hold_gil_in_c()


def hold_gil_in_c() -> None:
    """Block forever in a C call without releasing the GIL.

    ``ctypes.PyDLL`` (unlike ``CDLL``) keeps the GIL during the call, as a C
    extension that forgets ``Py_BEGIN_ALLOW_THREADS`` does. ``read`` on a pipe
    nobody writes to blocks, and is restarted after a signal handler
    (SA_RESTART), so even faulthandler's signal does not end it.
    """
    import ctypes

    r, _w = os.pipe()
    buf = ctypes.create_string_buffer(1)
    ctypes.PyDLL(None).read(r, buf, 1)


def setup_comm_hooks(
    args: argparse.Namespace,
    model: nn.parallel.DistributedDataParallel,
    hook: LivenessProbeHook | None,
) -> bool | None:
    """Register the user's comm hook and/or trainprobe's; returns watch_ddp's result."""
    user = {"": None, "allreduce": default_hooks.allreduce_hook}.get(
        args.user_comm_hook, default_hooks.fp16_compress_hook
    )
    if user is not None and (args.register_hook_first or not args.watch_ddp):
        model.register_comm_hook(model.process_group, user)
        user = None
    if not args.watch_ddp or hook is None:
        return None
    return hook.watch_ddp(model, comm_hook=user, state=model.process_group)


def skip_allreduce(model: nn.Module, loss: torch.Tensor, rank: int, world: int) -> None:
    """Miss this step's gradient allreduce, then block where no peer will answer."""
    with model.no_sync():
        loss.backward()
    dist.recv(torch.zeros(1), src=(rank + 1) % world)


def wait_for_file(path: str) -> None:
    while not Path(path).exists():
        time.sleep(0.01)


def nvrx_client() -> Any:
    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

    client = RankMonitorClient()
    client.init_workload_monitoring()
    return client


def mismatched_collective(hook: LivenessProbeHook | None, odd: bool, value: torch.Tensor) -> None:
    """All ranks but one all-reduce; the odd one all-gathers: nobody ever returns."""
    op = "all_gather" if odd else "all_reduce"
    with hook.collective(op) if hook is not None else contextlib.nullcontext():
        if odd:
            dist.all_gather([torch.zeros_like(value) for _ in range(dist.get_world_size())], value)
        else:
            dist.all_reduce(value)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return train(args)
    except Exception as err:
        # The gloo timeout, or a peer that vanished (trainprobe killed the culprit):
        # when this rank found out.
        log_event(
            args.progress, rank=int(os.environ.get("RANK", -1)), event="error", error=repr(err)
        )
        if args.after_error == "sleep":
            time.sleep(3600)
        raise


def train(args: argparse.Namespace) -> int:
    if args.pg_timeout_s > 0:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)),
        bucket_cap_mb=args.bucket_cap_mb,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = None if args.no_hook else LivenessProbeHook(interval_ms=args.interval_ms)
    watched = setup_comm_hooks(args, model, hook)
    log_event(
        args.progress, rank=rank, pid=os.getpid(), event="start", world=world, watched=watched
    )
    if args.start_file:
        wait_for_file(args.start_file)
    nvrx = nvrx_client() if args.nvrx else None
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
                mode=args.hang_how,
            )
            if args.hang_how == "skip":
                skip_allreduce(model, loss, rank, world)
            hang(args.hang_how)
        if rank == args.delay_backward_rank and step == args.delay_backward_at:
            log_event(args.progress, rank=rank, event="delay", step=step)
            time.sleep(args.delay_backward_s)
        loss.backward()  # gloo allreduce of the gradients: peers of a hung rank block here
        if args.save_grads and step == args.save_grads_at:
            grads = [p.grad.clone() for p in model.parameters()]
            torch.save(grads, f"{args.save_grads}-rank{rank}.pt")
        if step == args.mismatch_at:
            log_event(args.progress, rank=rank, pid=os.getpid(), event="mismatch", step=step)
            mismatched_collective(hook, rank == args.mismatch_rank, loss.detach().clone())
        if args.user_collective_every and step % args.user_collective_every == 0:
            metric = loss.detach().clone()
            if hook is not None:
                with hook.collective("metrics"):
                    dist.all_reduce(metric)
            else:
                dist.all_reduce(metric)
        opt.step()
        opt.zero_grad()
        time.sleep(args.step_s)
        if hook is not None:
            hook.on_step_end(step)
        if nvrx is not None:
            nvrx.send_heartbeat()
            if step == args.nvrx_calc_at:
                nvrx.calculate_and_set_hb_timeouts()
                log_event(args.progress, rank=rank, event="nvrx_timeouts", **vars(nvrx.hb_timeouts))
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
