"""Training step time on a GPU with and without watch_ddp and the hook (NCCL).

One process, world size 1. Two DDP models built from the same weights: one
plain, one watched by a LivenessProbeHook that streams reports to a real
sidecar process (200 ms interval, so the reporter reads CUDA events and NVML
throughout). Steps alternate between the two (A B A B ...); each step is
timed on the host from its start to a device synchronize at its end (the
benchmark syncs; the hook never does). The model is sized so that one step
takes well over 50 ms.

    python bench/bench_sync_gpu.py [--steps 60] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), *(str(ROOT / d) for d in ("proto", "hooks", "sidecar"))]

from tests.support import sidecar, wait_for  # noqa: E402
from trainprobe.hooks import LivenessProbeHook  # noqa: E402


def build(width: int, depth: int) -> nn.parallel.DistributedDataParallel:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.parallel.DistributedDataParallel(nn.Sequential(*layers).cuda(), device_ids=[0])


def timed_step(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, hook: LivenessProbeHook | None
) -> float:
    t0 = time.perf_counter()
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    if hook is not None:
        hook.on_step_end()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60, help="timed steps per variant")
    p.add_argument("--warmup", type=int, default=12)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--json", default="")
    args = p.parse_args()
    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda:0")
    )
    plain, watched = build(args.width, args.depth), build(args.width, args.depth)
    x = torch.randn(args.batch, args.width, device="cuda")
    opts = {
        "plain": torch.optim.SGD(plain.parameters(), lr=1e-6),
        "watched": torch.optim.SGD(watched.parameters(), lr=1e-6),
    }
    with sidecar() as sc:
        hook = LivenessProbeHook(
            target=sc.target, interval_ms=200, job_id="bench-gpu", rank=0, world_size=1
        )
        assert hook.watch_ddp(watched)
        wait_for(lambda: hook.connected, 30, what="the hook to connect")
        variants = {"plain": (plain, None), "watched": (watched, hook)}
        times: dict[str, list[float]] = {k: [] for k in variants}
        for i in range(args.warmup + args.steps):
            order = list(variants) if i % 2 == 0 else list(variants)[::-1]
            for name in order:
                model, h = variants[name]
                t = timed_step(model, opts[name], x, h)
                if i >= args.warmup:
                    times[name].append(t)
        time.sleep(0.5)
        row = sc.status("bench-gpu").workers[0]
        hook.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    paired = statistics.median(w / p for w, p in zip(times["watched"], times["plain"], strict=True))
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "model": f"{args.depth} x Linear({args.width},{args.width}) fp32, batch {args.batch}",
        "buckets_per_step": None,
        "steps_per_variant": args.steps,
        "median_step_s": med,
        "ratio_watched_over_plain": med["watched"] / med["plain"],
        "median_paired_ratio": paired,
        "sidecar_saw": {
            "collectives_completed": row.groups[0].completed if row.groups else 0,
            "sync_p50_s": row.sync_p50_s,
            "sync_max_s": row.sync_max_s,
            "gpu_reserved_bytes": row.gpu_memory.reserved_bytes,
            "gpu_device_used_bytes": row.gpu_memory.device_used_bytes,
        },
    }
    logging_data = watched._get_ddp_logging_data()
    result["buckets_per_step"] = len(
        str(logging_data.get("rebuilt_bucket_sizes") or logging_data["bucket_sizes"]).split(",")
    )
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
