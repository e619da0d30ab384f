"""One rank of a fault-matrix job (bench/bench_faults.py): DDP over gloo, one case.

    python bench/harness/fault_worker.py --case CASE --case-rank R --case-at S [--watch-ddp]
        [--no-hook | --nvrx | --pg-timeout-s T] --progress FILE --start-file FILE

tests/workers/ddp_worker.py's loop (a tiny MLP, ``--step-s`` per step), with one
event at step ``--case-at`` on rank ``--case-rank`` (or on every rank where
the case says so). Onset (the ``hang`` or ``event`` progress line) is logged
just before the event starts.

Faults (the rank never comes back): sleep (inside the step, before its
backward), stop (SIGSTOP itself), lock (a second acquire of a
threading.Lock it holds), gil (a C call that holds the GIL: ctypes.PyDLL
read() on an empty pipe), kill9 (SIGKILL itself; its peers, like ranks
stuck in NCCL, then sleep instead of exiting: ``--after-error sleep``), skip
(misses the gradient allreduce, then waits in a recv), mismatch (every rank
all-reduces a metric, this one all-gathers it).

Healthy cases (the job must finish): stall8/stall30/stall60 (a rank stalls
before its backward, in a blocking read of a pipe written 8 or 60 s later,
or a 30 s sleep, then resumes), eval (every rank runs a 40 s evaluation
with a metric all-reduce every 0.2 s and no step, undeclared), ckpt_phase /
ckpt_out (rank 0 writes a 40 s checkpoint inside ``hook.phase`` / outside any
phase while its peers wait in the next allreduce), compile60 (every rank
spends 60 s in its first step, as a torch.compile warm-up does; a sleep here,
to spare the shared CPU), slow2x (one rank's steps take twice as long),
sidecar_frozen (nothing here: the benchmark SIGSTOPs the sidecar for 30 s).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "workers"))

import torch
import torch.distributed as dist
from ddp_worker import (
    hold_gil_in_c,
    log_event,
    mismatched_collective,
    nvrx_client,
    skip_allreduce,
    wait_for_file,
)
from torch import nn

FAULTS = ("sleep", "stop", "lock", "gil", "kill9", "skip", "mismatch")
HEALTHY = (
    "stall8",
    "stall30",
    "stall60",
    "eval",
    "ckpt_phase",
    "ckpt_out",
    "compile60",
    "slow2x",
    "sidecar_frozen",
)
#: Length of the healthy events, in seconds.
EVENT_S = {"stall8": 8, "stall30": 30, "stall60": 60, "eval": 40, "ckpt_phase": 40}
EVENT_S |= {"ckpt_out": 40, "compile60": 60}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--case", choices=[*FAULTS, *HEALTHY], required=True)
    p.add_argument("--case-rank", type=int, default=1)
    p.add_argument("--case-at", type=int, default=30)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--step-s", type=float, default=0.1)
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument("--watch-ddp", action="store_true")
    p.add_argument("--no-hook", action="store_true")
    p.add_argument("--nvrx", action="store_true")
    p.add_argument("--nvrx-calc-at", type=int, default=20)
    p.add_argument("--pg-timeout-s", type=float, default=0.0)
    p.add_argument("--progress", default="")
    p.add_argument("--start-file", default="")
    return p.parse_args()


def blocking_read(seconds: float) -> None:
    """Block in read() until a timer writes to the pipe (a slow filesystem read)."""
    r, w = os.pipe()
    threading.Timer(seconds, os.write, (w, b"x")).start()
    os.read(r, 1)


def fault(case: str, model: nn.Module, loss: torch.Tensor, rank: int, world: int) -> None:
    if case == "sleep":
        time.sleep(10**6)
    elif case == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif case == "lock":
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # a deadlock: this thread holds it already
    elif case == "gil":
        hold_gil_in_c()
    elif case == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)
    elif case == "skip":
        skip_allreduce(model, loss, rank, world)


def evaluate(model: nn.Module, seconds: float) -> None:
    """An undeclared evaluation: forward passes and metric all-reduces, no step.

    A fixed number of batches, as an eval set has: a loop on each rank's own
    clock ran a different number of all-reduces per rank under load, a real
    collective mismatch that gloo ended (a healthy case must be healthy).
    """
    with torch.no_grad():
        for _ in range(round(seconds / 0.2)):
            metric = model(torch.randn(16, 32)).mean()
            dist.all_reduce(metric)
            time.sleep(0.2)


def train(args: argparse.Namespace) -> int:
    if args.pg_timeout_s > 0:
        import datetime

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = None
    if not args.no_hook:
        from trainprobe.hooks import LivenessProbeHook

        hook = LivenessProbeHook(interval_ms=args.interval_ms)
        if args.watch_ddp:
            hook.watch_ddp(model)
    log_event(args.progress, rank=rank, pid=os.getpid(), event="start", world=world)
    if args.start_file:
        wait_for_file(args.start_file)
    nvrx = nvrx_client() if args.nvrx else None
    case, mine = args.case, rank == args.case_rank
    step_s = args.step_s * (2 if case == "slow2x" and mine else 1)
    for step in range(1, args.steps + 1):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        at = step == args.case_at
        if at and mine and case in FAULTS and case != "mismatch":
            log_event(args.progress, rank=rank, pid=os.getpid(), event="hang", step=step)
            fault(case, model, loss, rank, world)
        if at and mine and case.startswith("stall"):
            log_event(args.progress, rank=rank, event="event", step=step)
            (blocking_read if case != "stall30" else time.sleep)(EVENT_S[case])
        if case == "compile60" and step == 1:
            log_event(args.progress, rank=rank, event="event", step=step)
            time.sleep(EVENT_S[case])
        loss.backward()
        if at and case == "mismatch":
            if mine:
                log_event(args.progress, rank=rank, pid=os.getpid(), event="hang", step=step)
            mismatched_collective(hook, mine, loss.detach().clone())
        opt.step()
        opt.zero_grad()
        time.sleep(step_s)
        if hook is not None:
            hook.on_step_end(step)
        if nvrx is not None:
            nvrx.send_heartbeat()
            if step == args.nvrx_calc_at:
                nvrx.calculate_and_set_hb_timeouts()
        log_event(args.progress, rank=rank, event="step", step=step)
        if at and case == "eval":
            log_event(args.progress, rank=rank, event="event", step=step)
            evaluate(model, EVENT_S[case])
        if at and mine and case.startswith("ckpt"):
            log_event(args.progress, rank=rank, event="event", step=step)
            if case == "ckpt_phase" and hook is not None:
                with hook.phase("checkpoint"):
                    time.sleep(EVENT_S[case])
            else:
                time.sleep(EVENT_S[case])
    dist.barrier()
    log_event(args.progress, rank=rank, event="done")
    if hook is not None:
        hook.close()
    dist.destroy_process_group()
    return 0


def main() -> int:
    args = parse_args()
    try:
        return train(args)
    except Exception as err:
        log_event(
            args.progress, rank=int(os.environ.get("RANK", -1)), event="error", error=repr(err)
        )
        if args.case == "kill9":
            time.sleep(10**6)  # as ranks stuck in NCCL would: only a kill ends them
        raise


if __name__ == "__main__":
    sys.exit(main())
