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

import time

import torch
import torch.distributed as dist
from _faults import checkpoint, demo_args, evaluate, fault, job_rank, note
from torch import nn

from trainprobe.hooks import LivenessProbeHook, replicate  # replicated


def main() -> None:
    args = demo_args(__doc__)

    # 1: first thing, before the process group: connects in the background, never
    # blocks training, and a rank stuck in init_process_group is named.
    hook = LivenessProbeHook()
    dist.init_process_group("gloo")
    rank = job_rank()
    torch.manual_seed(rank)  # each rank its own batches, as a DistributedSampler gives them
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = replicate(hook, model, opt)  # replicated: torchft, watch_torchft

    for step in opt.steps(args.steps):  # replicated: until that many steps commit
        loss = model(torch.randn(16, 32)).pow(2).mean()
        fault(args, rank, step)  # the demo's --hang-*: before the backward
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


if __name__ == "__main__":
    main()
