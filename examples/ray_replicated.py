"""examples/ddp_replicated.py under Ray Train: the same loop, the same ``replicate`` line.

    pip install '.[ray,torchft]' 'ray[train]'
    python examples/ray_replicated.py --replicas 2 --hang-rank 1 --hang-at 15 --hang-how stop

``main`` starts a local Ray, trainprobe's sidecar on its node and a
``TorchTrainer`` of :func:`train_func` on ``--replicas`` CPU workers with
Ray Train's ``TorchftConfig`` (``trainprobe.hooks.ray_train.torchft_config``:
Ray's lighthouse, with the settings ``trainprobe run`` gives its own). Ray
Train makes each worker its own replica group (its own process group and
store) and replaces a failed group alone; ``replicate`` finds the group,
the lighthouse and the store in what Ray Train set, so :func:`train_func` is
examples/ddp_replicated.py's ``main`` with three lines Ray's way (the
function's signature, the flags from the trainer's config, and no
``init_process_group``: Ray Train made the group's). The other flags are the
demo's (examples/_faults.py); ``--progress FILE`` records the hang, each
step and the parameters at the end (default: progress.jsonl in the run's
directory), and makes the fault come once in the job.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _faults import checkpoint, demo_args, evaluate, fault, job_rank, note
from torch import nn

from trainprobe.hooks import LivenessProbeHook, replicate  # replicated


def train_func(config: dict[str, Any]) -> None:
    args = demo_args(__doc__, config["argv"])

    # 1: first thing (Ray Train made the replica group's process group before
    # train_func): connects in the background, never blocks training.
    hook = LivenessProbeHook()
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


def make_trainer(argv: list[str], storage_path: str, name: str, replicas: int = 2) -> Any:
    """A ``TorchTrainer`` of :func:`train_func` with the demo's flags ``argv``,
    ``replicas`` CPU workers (a replica group each) and trainprobe's lighthouse
    settings (``torchft_config``)."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from trainprobe.hooks.ray_train import torchft_config

    return TorchTrainer(
        train_func,
        train_loop_config={"argv": list(argv)},
        scaling_config=ScalingConfig(num_workers=replicas, use_gpu=False),
        torch_config=torchft_config(backend="gloo"),
        run_config=RunConfig(
            name=name, storage_path=storage_path, failure_config=FailureConfig(max_failures=3)
        ),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    p.add_argument("--replicas", type=int, default=2, help="Ray Train workers, a group each")
    known, argv = p.parse_known_args()
    demo_args(__doc__, argv)  # the demo's flags: --help, or an error, here rather than in Ray
    # Ray's workers import this file and examples/_faults.py by name.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, here)
    import ray

    from trainprobe.sidecar import load_settings
    from trainprobe.sidecar.ray import start_sidecars, stop_sidecars

    os.environ.setdefault("RUST_LOG", "warn")  # torchft logs every quorum and commit at info
    ray.init(address="local", num_cpus=max(2, known.replicas))  # a new local Ray, never another
    work = Path(tempfile.mkdtemp(prefix="tp-ray-replicated-"))
    if not any(a == "--progress" or a.startswith("--progress=") for a in argv):
        # The fault comes once a job only through this file: without it, Ray
        # Train's replacement of the evicted worker hangs again, every time,
        # until max_failures ends the run.
        argv += ["--progress", str(work / "progress.jsonl")]
    try:
        start_sidecars(load_settings(cli={"state_dir": str(work / "state")}))
        make_trainer(argv, str(work / "storage"), "ray-replicated", known.replicas).fit()
        print(f"done; the sidecar's incident log is under {work / 'state'}")
    finally:
        stop_sidecars()
        ray.shutdown()


if __name__ == "__main__":
    main()
