"""Host time the DDP comm hook costs the training thread, per bucket (CPU, gloo).

Side by side in one process, interleaved call by call in rotating order:

- ``torch``:  PyTorch's default comm hook, ``default_hooks.allreduce_hook``;
- ``bare``:   trainprobe's allreduce (exactly DDP's: multiply, allreduce, one
              callback) without any accounting, to isolate the accounting;
- ``watched``: the hook ``LivenessProbeHook.watch_ddp`` registers.

Each sample is the wall time from calling the hook to its return (what the
autograd thread spends per bucket); the collective's own completion is awaited
outside the timed region. The figures that matter are medians of paired
differences (each call minus the ``torch`` call of the same iteration), then
the median over rounds. The buckets are DDP's own GradBucket objects, taken
from a real backward pass. Between rounds the ledger is drained, as the
reporter thread would.

    python bench/probes/bench_sync.py [--calls 20000] [--rounds 5] [--json OUT]

With ``--cuda`` the same runs over NCCL on GPU 0 (world size 1), where the
watched hook also records two CUDA events per bucket; the GPU is synchronized
between batches of calls, outside the timed region.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / d) for d in ("proto", "hooks", "sidecar")]

from trainprobe.hooks import LivenessProbeHook  # noqa: E402
from trainprobe.hooks.watch.ddp import default_allreduce_hook  # noqa: E402

Hook = Callable[[object, dist.GradBucket], torch.futures.Future]


def real_bucket(numel: int, device: str) -> dist.GradBucket:
    """A GradBucket as DDP builds it, captured from one backward pass."""
    captured: list[dist.GradBucket] = []

    def capture(state, bucket):
        captured.append(bucket)
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    module = nn.Linear(numel - 1, 1).to(device)
    model = nn.parallel.DistributedDataParallel(module)
    model.register_comm_hook(None, capture)
    model(torch.randn(2, numel - 1, device=device)).sum().backward()
    return captured[0]


def bare_hook(state: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future:
    buf = bucket.buffer()
    buf.mul_(1.0 / state.size())
    fut = dist.all_reduce(buf, group=state, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def measure(hooks: dict[str, Hook], bucket: dist.GradBucket, calls: int, drain: Callable) -> dict:
    """Median host time per hook and median paired difference to ``torch``, in us.

    Pairing (each call against the ``torch`` call of the same iteration)
    cancels the load drift of a shared machine, which unpaired medians do not.
    """
    pg = dist.group.WORLD
    times: dict[str, list[int]] = {k: [] for k in hooks}
    order = list(hooks.items())
    clock = time.perf_counter_ns
    for i in range(calls):
        k = i % len(order)
        for name, hook in order[k:] + order[:k]:
            t0 = clock()
            fut = hook(pg, bucket)
            t1 = clock()
            fut.wait()
            times[name].append(t1 - t0)
        if i % 512 == 0:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
            drain()
    base = times["torch"]
    return {
        "median_us": {k: statistics.median(v) / 1000 for k, v in times.items()},
        "paired_minus_torch_us": {
            k: statistics.median(a - b for a, b in zip(v, base, strict=True)) / 1000
            for k, v in times.items()
            if k != "torch"
        },
        "paired_watched_minus_bare_us": statistics.median(
            a - b for a, b in zip(times["watched"], times["bare"], strict=True)
        )
        / 1000,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--numel", type=int, default=256, help="floats per bucket")
    p.add_argument("--cuda", action="store_true", help="NCCL on GPU 0 instead of gloo on CPU")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.cuda:
        torch.cuda.set_device(0)
        dist.init_process_group(
            "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda:0")
        )
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    probe = LivenessProbeHook(
        target="unix:///nonexistent/bench.sock", job_id="bench", rank=0, world_size=1, start=False
    )
    device = 0 if args.cuda else None
    watched = default_allreduce_hook(probe._sync.group(None), 1, probe._event_pools, device)
    hooks = {"torch": default_hooks.allreduce_hook, "bare": bare_hook, "watched": watched}
    bucket = real_bucket(args.numel, "cuda" if args.cuda else "cpu")
    measure(hooks, bucket, 2000, probe._sync.collect)  # warm-up
    rounds = [measure(hooks, bucket, args.calls, probe._sync.collect) for _ in range(args.rounds)]
    result = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "backend": "nccl" if args.cuda else "gloo",
        "calls_per_round": args.calls,
        "floats_per_bucket": args.numel,
        "rounds": rounds,
        "median_us": {k: statistics.median(r["median_us"][k] for r in rounds) for k in hooks},
        "watched_minus_torch_us": statistics.median(
            r["paired_minus_torch_us"]["watched"] for r in rounds
        ),
        "watched_minus_bare_us": statistics.median(
            r["paired_watched_minus_bare_us"] for r in rounds
        ),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
