"""A replicated Ray Train job: TorchftConfig, one replica group per worker, trainprobe watching.

The shape of Ray's own ``ray/train/v2/examples/pytorch/torchft_linear_example.py``
(each worker is its own replica group with a torchft Manager and
ProcessGroupGloo), plus the hook (``LivenessProbeHook(torchft=manager)``) and
trainprobe's DDP wrapper, whose comm hook survives torchft's error path.
With a per-node sidecar (``start_sidecars()``, shipped defaults), a worker
that hangs is evicted alone; Ray Train replaces that replica group only, and
the new worker heals from a surviving replica while the others go on.

Fault: worker ``fault_rank`` does ``fault`` (sleep, stop) at committed step
``fault_at``, once per run (a marker file in ``progress``'s folder). Events
go to ``config["progress"]`` as JSON lines (begin, start, step, fault, done).

    python examples/ray_torchft_job.py --fault sleep
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "steps": 60,
    "step_s": 0.05,
    "interval_ms": 250,
    "fault": "none",
    "fault_rank": 1,
    "fault_at": 15,
    "progress": "",
}


def emit(path: str, **row: object) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "pid": os.getpid(), **row}) + "\n")


def train_func(config: dict[str, Any]) -> None:
    import ray.train

    cfg = {**DEFAULTS, **config}
    rank = ray.train.get_context().get_world_rank()
    progress = str(cfg["progress"])
    emit(progress, event="begin", rank=rank)  # Ray Train's part of a (re)start ends here
    import torch
    import torchft

    from trainprobe.hooks import LivenessProbeHook
    from trainprobe.hooks.torchft import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def load_state_dict(sd: dict[str, Any]) -> None:
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    manager = torchft.Manager(
        pg=torchft.ProcessGroupGloo(timeout=timedelta(seconds=30)),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=lambda: {"model": model.state_dict(), "optim": opt.state_dict()},
        world_size=1,
        rank=0,
        replica_id=f"train_{rank}",  # each worker is its own replica group
        timeout=timedelta(seconds=30),
    )
    ddp = DistributedDataParallel(manager, model)
    optimizer = torchft.Optimizer(manager, opt)
    marker = Path(progress).with_suffix(".fault") if progress else None
    faulty = cfg["fault"] != "none" and rank == cfg["fault_rank"]
    faulty = faulty and not (marker is not None and marker.exists())
    # A context manager: Ray Train ends workers with ray.kill, which skips atexit.
    with LivenessProbeHook(interval_ms=int(cfg["interval_ms"]), torchft=manager) as hook:
        emit(progress, event="start", rank=rank)
        while manager.current_step() < int(cfg["steps"]):
            step = manager.current_step()
            optimizer.zero_grad()
            x = torch.randn(16, 8, generator=torch.Generator().manual_seed(step))
            time.sleep(float(cfg["step_s"]))
            # Once another replica is in this step's quorum: it then waits for this one.
            if faulty and step >= int(cfg["fault_at"]) and manager.num_participants() >= 2:
                faulty = False
                if marker is not None:
                    marker.touch()
                emit(progress, event="fault", rank=rank, fault=cfg["fault"], step=step)
                if cfg["fault"] == "sleep":
                    time.sleep(3600)
                elif cfg["fault"] == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
            loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            loss.backward()
            optimizer.step()
            if manager.current_step() > step:
                hook.on_step_end(manager.current_step())
                emit(progress, event="step", rank=rank, step=manager.current_step())
        params = [float(v) for p in model.parameters() for v in p.detach().flatten()]
        emit(progress, event="done", rank=rank, params=params)
    # As Ray's example: shut down, so a replica that lags behind does not wait on us.
    manager.shutdown(wait=False)


def make_trainer(
    config: dict[str, Any],
    storage_path: str,
    name: str,
    workers: int = 2,
    lighthouse: dict[str, Any] | None = None,
) -> Any:
    """``lighthouse``: the lighthouse's settings as they are (``{"min_replicas": 1}``
    is Ray's own example); by default trainprobe's (``torchft_config``)."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.v2.torch.torchft_config import TorchftConfig

    from trainprobe.hooks.ray_train import torchft_config

    return TorchTrainer(
        train_func,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
        # trainprobe's lighthouse settings: the survivors' next quorum forms 1 s
        # after the evicted replica's last heartbeat (torchft's default is 5 s).
        torch_config=(
            torchft_config(backend="gloo")
            if lighthouse is None
            else TorchftConfig(lighthouse_kwargs=lighthouse, backend="gloo")
        ),
        run_config=RunConfig(
            name=name, storage_path=storage_path, failure_config=FailureConfig(max_failures=3)
        ),
    )


def main() -> None:
    import argparse
    import tempfile

    import ray

    from trainprobe.sidecar import load_settings
    from trainprobe.sidecar.ray import start_sidecars, stop_sidecars

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fault", default="sleep", choices=("none", "sleep", "stop"))
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    ray.init(num_cpus=2)
    work = Path(tempfile.mkdtemp(prefix="tp-ray-ft-"))
    try:
        start_sidecars(load_settings(cli={"state_dir": str(work / "state")}))
        progress = work / "progress.jsonl"
        trainer = make_trainer(
            {"fault": args.fault, "steps": args.steps, "progress": str(progress)},
            str(work / "storage"),
            "torchft-demo",
        )
        trainer.fit()
        print(progress.read_text())
    finally:
        stop_sidecars()
        ray.shutdown()


if __name__ == "__main__":
    main()
