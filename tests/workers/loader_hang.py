"""A hooked rank whose DataLoader worker gets stuck, after starting a helper.

Usage: loader_hang.py JOB_ID STEPS

Steps every 50 ms on batches from a real ``torch.utils.data.DataLoader`` with one
worker process. The worker, asked for item STEPS, starts a helper process (a
grandchild of the rank) and hangs, so the rank blocks waiting for its batch:
the kill of the rank must end both (no orphan re-parented to init). Prints
``rank PID``, then ``worker PID grandchild PID`` from the worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from trainprobe.hooks import LivenessProbeHook


class Stuck(Dataset):
    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.steps:
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            print(f"worker {os.getpid()} grandchild {helper.pid}", flush=True)
            time.sleep(3600)
        return torch.tensor([i])


def main() -> int:
    job, steps = sys.argv[1], int(sys.argv[2])
    hook = LivenessProbeHook(interval_ms=100, job_id=job, rank=0, world_size=1)
    print(f"rank {os.getpid()}", flush=True)
    loader = DataLoader(Stuck(steps), batch_size=None, num_workers=1, prefetch_factor=2)
    for step, _batch in enumerate(loader, 1):
        time.sleep(0.05)
        hook.on_step_end(step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
