"""The demo's side of examples/ddp_train.py and examples/ddp_replicated.py: their
flags, the real faults they inject, the pauses that are not hangs, and the
progress file the tests and benchmarks read (examples/torchrun_train.py takes
its fault flags from here too). Not something to copy into a training script:
the hook's lines and the loop stay in the examples.

``--hang-rank R --hang-at S`` makes rank R hang inside step S (or the first
step past S it trains), before its backward, so its peers block in the
gradient allreduce. ``--hang-how`` says how: ``sleep`` (an hour), ``stop``
(SIGSTOP), ``stall8`` (an 8 s pause that ends by itself), ``deadlock`` (a lock
taken twice), ``gil`` (a C call that holds the GIL), ``kill9`` (SIGKILL) or
``loader`` (a wait on a DataLoader worker that blocks). ``--progress FILE``
records, one JSON line each, when a rank started to hang, each step, and the
parameters at the end; it also makes the fault once a job (without it, a
restarted process hangs again). Every ``--checkpoint-every`` steps a rank saves
(``--checkpoint-dir``; else it pauses 0.5 s), then evaluates
``--eval-batches`` batches.

The examples import this module by its file name, as ``python
examples/x.py`` (or torchrun, or ``trainprobe run``) puts examples/ first on
``sys.path``; under Ray, examples/ must be on the workers' PYTHONPATH.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import threading
import time

import torch
from torch import nn

__all__ = [
    "FAULTS",
    "checkpoint",
    "demo_args",
    "evaluate",
    "fault",
    "fault_args",
    "job_rank",
    "note",
]

#: The faults --hang-how injects, each real: see hang().
FAULTS = ("sleep", "stop", "stall8", "deadlock", "gil", "kill9", "loader")


def demo_args(doc: str | None, argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's flags, from ``argv`` (the command line's when None)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-s", type=float, default=0.05, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=50)
    fault_args(p, "once a job with --progress, else once a process (a restarted rank hangs again)")
    p.add_argument("--checkpoint-dir", default="", help="torch.save there (else a 0.5 s pause)")
    p.add_argument("--eval-batches", type=int, default=0, help="an eval after each checkpoint")
    p.add_argument("--progress", default="", help="append the hang, steps, params (JSON lines)")
    return p.parse_args(argv)


def fault_args(p: argparse.ArgumentParser, once: str, faults: tuple[str, ...] = FAULTS) -> None:
    """``--hang-rank``, ``--hang-at`` and ``--hang-how`` on ``p``: every example that
    injects a hang takes these three, spelt here alone. ``once`` says when the
    fault comes again; ``faults``, the ones that example injects."""
    p.add_argument("--hang-rank", type=int, default=-1, help="the rank that hangs (-1: none)")
    p.add_argument("--hang-at", type=int, default=-1, help=f"the step it hangs in: {once}")
    p.add_argument("--hang-how", choices=faults, default="sleep", help="how it hangs")


def job_rank() -> int:
    """The rank the demo's flags name: job-wide, as a replica group's ranks start at 0.

    From torchrun's variables, which ``trainprobe run`` sets per replica group and
    Ray Train job-wide (its replica groups' process groups are each a group's)."""
    return int(os.environ.get("REPLICA_GROUP_ID", 0)) * _world() + int(os.environ.get("RANK", 0))


def _world() -> int:
    """WORLD_SIZE: the replica group's ranks under ``trainprobe run``, the job's elsewhere."""
    return int(os.environ.get("WORLD_SIZE", 1) or 1)


def fault(args: argparse.Namespace, rank: int, step: int) -> None:
    """Hang here if the flags say this rank hangs at this step (once: see first_fault)."""
    if rank == args.hang_rank and step >= args.hang_at and first_fault(args.progress):
        hang(args.progress, rank, step, args.hang_how)


def checkpoint(folder: str, rank: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    if not folder:
        time.sleep(0.5)  # what a save of a real model could take
        return
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    torch.save(state, os.path.join(folder, f"rank{rank}.pt"))


def evaluate(model: nn.Module, batches: int, step_s: float) -> None:
    """Forward passes without gradients, each as long as a training step."""
    if batches <= 0:
        return
    model.eval()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(16, 32)).pow(2).mean()
            time.sleep(step_s)
    model.train()


def note(progress: str, event: str, **row: object) -> None:
    if progress:
        with open(progress, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "event": event, "pid": os.getpid(), **row}))
            fh.write("\n")


def first_fault(progress: str, done: list[bool] = []) -> bool:  # noqa: B006 (once a process)
    """The fault comes once a process and, with --progress, once a job, and not
    before every rank of the job has stepped (a replica group that started first
    trains alone until the others join): a rank restarted after it (or a replica
    that joined past --hang-at) does not repeat it."""
    if done:
        return False
    if progress and os.path.exists(progress):
        with open(progress) as fh:
            rows = [json.loads(line) for line in fh]
        if any(r["event"] == "hang" for r in rows):
            done.append(True)
            return False
        ranks = int(os.environ.get("NUM_REPLICA_GROUPS", 1)) * _world()
        if len({r["rank"] for r in rows if r["event"] == "step"}) < ranks:
            return False  # a later step, then
    done.append(True)
    return True


class StuckReads(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset whose read never returns (a hung file system, say)."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(3600)
        return torch.zeros(1)


def hang(progress: str, rank: int, step: int, how: str = "sleep") -> None:
    note(progress, "hang", rank=rank, step=step, how=how)
    print(f"rank {rank} (pid {os.getpid()}) hangs in step {step} ({how})", flush=True)
    if how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif how == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "deadlock":  # a lock the training thread already holds
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    elif how == "gil":  # libc's sleep called with the GIL held: no other thread runs
        ctypes.PyDLL(None).sleep(3600)
    elif how == "loader":  # the rank waits in the DataLoader for a worker that blocks
        next(iter(torch.utils.data.DataLoader(StuckReads(), num_workers=1)))
    else:
        time.sleep(8 if how == "stall8" else 3600)
