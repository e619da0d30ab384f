"""A plain DDP training loop with trainprobe's hook: the three lines a script needs.

    trainprobe-sidecar &
    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py

It trains a tiny MLP on CPU over gloo. The hook finds its rank, world size,
job and sidecar by itself (RANK, WORLD_SIZE, TORCHELASTIC_RUN_ID,
TRAINPROBE_TARGET); ``hook.watch_ddp(model)`` lets the sidecar compare the
ranks' gradient allreduces, so a hung rank is told from the peers waiting for
it; ``hook.phase(...)`` declares a long pause that is not a hang.

For the demo (``make demo-gloo``): ``--hang-rank R --hang-at S`` makes rank R
hang inside step S, before its backward, so its peers block in the allreduce;
``--hang-how`` says how (a sleep, SIGSTOP, a deadlock, the GIL held, ...), and
``--progress FILE`` records the hang, each step and the parameters at the end
(and makes the hang once a job: without it, each restarted process hangs again).
Every ``--checkpoint-every`` steps it saves (``--checkpoint-dir``; else it
pauses 0.5 s) in a declared phase, then evaluates ``--eval-batches`` batches.
These flags, the faults and the checkpoint are the demo's, in examples/_faults.py
(shared with the replicated script); what a training script needs is below.

examples/ddp_replicated.py is this script made replicated (torchft replica
groups under ``trainprobe run``) by three changed lines.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from _faults import checkpoint, demo_args, evaluate, fault, job_rank, note
from torch import nn

from trainprobe.hooks import LivenessProbeHook


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
    hook.watch_ddp(model)  # 2: per-bucket allreduce sequence numbers and latency

    for step in range(1, args.steps + 1):
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
