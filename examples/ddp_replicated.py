"""examples/ddp_train.py, replicated: three changed lines (marked "replicated").

    trainprobe run --replicas 2 -- python examples/ddp_replicated.py

``trainprobe run`` starts a torchft lighthouse, a sidecar (unless one serves)
and one replica group per replica (``--nproc-per-replica K`` ranks each),
restarting a group alone when it exits. Each group trains the loop below; a
step commits with the groups in its quorum. When a rank hangs, the sidecar
evicts its group, the other groups go on within seconds, and the evicted group,
restarted, fetches parameters and optimizer state from a live peer and trains
on at the survivors' step. Under plain ``torchrun`` the script is plain DDP.
The changed lines, against examples/ddp_train.py: the import, ``replicate``
in place of ``hook.watch_ddp``, and the loop over committed steps.
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
import torch.distributed as dist
from torch import nn

from trainprobe.hooks import LivenessProbeHook, replicate  # replicated


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-s", type=float, default=0.05, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--hang-how", choices=FAULTS, default="sleep")
    p.add_argument("--checkpoint-dir", default="", help="torch.save there (else a 0.5 s pause)")
    p.add_argument("--eval-batches", type=int, default=0, help="an eval after each checkpoint")
    p.add_argument("--progress", default="", help="append the hang, steps, params (JSON lines)")
    args = p.parse_args()

    # 1: first thing, before the process group: connects in the background, never
    # blocks training, and a rank stuck in init_process_group is named.
    hook = LivenessProbeHook()
    dist.init_process_group("gloo")
    # The demo's faults name a job-wide rank (a replica group's ranks start at 0).
    rank = int(os.environ.get("REPLICA_GROUP_ID", 0)) * dist.get_world_size() + dist.get_rank()
    torch.manual_seed(rank)  # each rank its own batches, as a DistributedSampler gives them
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = replicate(hook, model, opt)  # replicated: torchft, watch_torchft

    for step in opt.steps(args.steps):  # replicated: until that many steps commit
        loss = model(torch.randn(16, 32)).pow(2).mean()
        if rank == args.hang_rank and step >= args.hang_at and first_fault(args.progress):
            hang(args.progress, rank, step, args.hang_how)
        loss.backward()  # the gradient allreduce: a hung rank's peers wait here
        opt.step()
        opt.zero_grad()
        time.sleep(args.step_s)
        hook.on_step_end(step)  # 3: one timestamp, well under a microsecond
        note(args.progress, "step", rank=rank, step=step)
        if step % args.checkpoint_every == 0:
            with hook.phase("checkpoint", timeout_s=600):  # a pause that is not a hang
                checkpoint(args.checkpoint_dir, rank, model, opt)
            evaluate(model, args.eval_batches, args.step_s)  # no phase: every rank at once

    params = [float(v) for t in model.parameters() for v in t.detach().flatten()[:8]]
    note(args.progress, "done", rank=rank, params=params)
    hook.close()
    dist.destroy_process_group()


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
        ranks = int(os.environ.get("NUM_REPLICA_GROUPS", 1)) * dist.get_world_size()
        if len({r["rank"] for r in rows if r["event"] == "step"}) < ranks:
            return False  # a later step, then
    done.append(True)
    return True


#: The faults --hang-how injects, each real: see hang().
FAULTS = ("sleep", "stop", "stall8", "deadlock", "gil", "kill9", "loader")


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


if __name__ == "__main__":
    main()
