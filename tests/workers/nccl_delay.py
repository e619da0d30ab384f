"""One NCCL rank (world size 1) whose allreduce is held back on the GPU.

Usage: nccl_delay.py DELAY_S AT_STEP PROGRESS_FILE

Each step all-reduces a tensor inside ``hook.collective("all_reduce")`` and
waits for the GPU in Python (polling a CUDA event, as ``.item()`` would wait).
At step AT_STEP a ``torch.cuda._sleep`` kernel of about DELAY_S seconds is put
on the stream first: the allreduce stays in flight (queued behind it) with no
host involvement, and the Flight Recorder holds it as not completed.
"""

from __future__ import annotations

import json
import os
import sys
import time

# The Flight Recorder records only if its buffer is sized before the process
# group exists (TORCH_NCCL_TRACE_BUFFER_SIZE is the older name).
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
os.environ.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")

import torch
import torch.distributed as dist

from trainprobe.hooks import LivenessProbeHook


def wait_for_gpu() -> None:
    done = torch.cuda.Event()
    done.record()
    while not done.query():
        time.sleep(0.01)


def main() -> int:
    delay_s, at, progress = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda:0")
    )
    hook = LivenessProbeHook(job_id="nccl1", rank=0, world_size=1, interval_ms=100)
    try:
        mhz = float(torch.cuda.clock_rate(0))
    except Exception:
        mhz = 1980.0  # H200's boost clock
    t = torch.ones(1 << 20, device="cuda")
    for step in range(1, 100_000):
        if step == at:
            with open(progress, "a") as fh:
                fh.write(json.dumps({"event": "delay", "t": time.time(), "mhz": mhz}) + "\n")
            torch.cuda._sleep(int(delay_s * mhz * 1e6))
        with hook.collective("all_reduce"):
            dist.all_reduce(t)
        wait_for_gpu()
        hook.on_step_end(step)
        time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
