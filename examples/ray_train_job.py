"""A small Ray Train job (TorchTrainer, CPU gloo) with trainprobe's hook and a fault.

Used by the Ray demo, the Ray tests and the Ray benchmark. Each worker trains
a tiny MLP under DDP, reports its steps to the sidecar of its Ray node
(found with no configuration), and saves a checkpoint every ``ckpt_every``
steps inside ``hook.phase("checkpoint")`` through
:func:`trainprobe.hooks.report_checkpoint`. After a restart it resumes from
the latest checkpoint.

Fault: rank ``hang_rank`` hangs inside step ``hang_at``, before its backward,
so its peers block in the gradient allreduce: ``hang_how`` ``sleep`` sleeps
for an hour (ambiguous: the sidecar waits out its patience), ``stop`` stops
itself with SIGSTOP (definitive). It hangs only in a run that did not restore
a checkpoint, so the restarted group runs through.

Second fault, in a restarted group's start-up: with ``start_hang`` set to a
file path, the rank ``hang_rank`` of the first group that restored a
checkpoint sleeps for an hour after making its hook, before its first step
(as a stuck first batch would), so its peers wait in that step's allreduce.
The file marks that it happened: the next group runs through.

Every event is appended as one JSON line to ``config["progress"]`` (begin:
Ray Train entered ``train_func``; prepared: the checkpoint restored, the model
wrapped in DDP; start: the hook made; step, checkpoint, hang, done), which the
callers read.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "steps": 30,
    "step_s": 0.05,
    "interval_ms": 200,
    "ckpt_every": 5,
    "hang_rank": -1,
    "hang_at": -1,
    "hang_how": "sleep",
    "progress": "",
    # hook.watch_ddp(model): sequence numbers let the sidecar name the culprit.
    "watch_ddp": False,
    # A file path: the second fault, once, in a restarted group's start-up.
    "start_hang": "",
}


def log_event(path: str, **event: object) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"t": time.time(), **event}) + "\n")


def read_events(path: str | Path, event: str | None = None) -> list[dict[str, Any]]:
    """The progress lines written so far (a torn last line is skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event is None or row.get("event") == event:
            out.append(row)
    return out


def hang(how: str) -> None:
    """``sleep`` for an hour, or ``stop``: SIGSTOP this process."""
    if how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(3600)


def _first_time(flag: str) -> bool:
    """Whether ``flag`` (a path) was just created here: true once, for one process."""
    if not flag:
        return False
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def hang_at_start(cfg: dict[str, Any], rank: int, restored: int) -> None:
    """The second fault, where a group's training starts (after its hook): rank
    ``hang_rank`` of the first group that ``restored`` a checkpoint sleeps for
    an hour once ``cfg["start_hang"]`` (a file path) is set. The framework
    loops of the tests (tests/workers/ray_frameworks.py) call it too."""
    if rank == cfg["hang_rank"] and restored and _first_time(cfg["start_hang"]):
        log_event(cfg["progress"], event="start_hang", rank=rank, pid=os.getpid())
        time.sleep(3600)


def train_func(config: dict[str, Any]) -> None:
    """The per-worker training loop (runs inside a Ray Train worker actor)."""
    import ray.train
    import ray.train.torch
    import torch
    from torch import nn

    from trainprobe.hooks import LivenessProbeHook, report_checkpoint

    cfg = {**DEFAULTS, **config}
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    log_event(cfg["progress"], event="begin", rank=rank, pid=os.getpid())
    restored, state = 0, None
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            restored = json.loads((Path(d) / "meta.json").read_text())["step"]
            state = torch.load(Path(d) / "model.pt", weights_only=True)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    if state is not None:
        net.load_state_dict(state)
    model = ray.train.torch.prepare_model(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank + 1000 * restored)
    log_event(cfg["progress"], event="prepared", rank=rank, restored_step=restored)
    # As a context manager the hook says Goodbye when train_func returns:
    # Ray Train then kills the worker with ray.kill, which skips atexit.
    with LivenessProbeHook(interval_ms=cfg["interval_ms"]) as hook:
        if cfg["watch_ddp"]:
            hook.watch_ddp(model)
        log_event(
            cfg["progress"],
            event="start",
            rank=rank,
            pid=os.getpid(),
            restored_step=restored,
            job_id=hook.identity.job_id,
            actor_id=hook.identity.ray.actor_id,
            node_id=hook.identity.ray.node_id,
            target=hook.target,
        )
        hang_at_start(cfg, rank, restored)
        for step in range(restored + 1, cfg["steps"] + 1):
            x = torch.randn(16, 32, generator=gen)
            loss = model(x).pow(2).mean()
            if rank == cfg["hang_rank"] and step == cfg["hang_at"] and restored == 0:
                log_event(cfg["progress"], event="hang", rank=rank, pid=os.getpid(), step=step)
                hang(cfg["hang_how"])
            loss.backward()  # gloo allreduce: the peers of a hung rank block here
            opt.step()
            opt.zero_grad()
            time.sleep(cfg["step_s"])
            hook.on_step_end(step)
            log_event(cfg["progress"], event="step", rank=rank, step=step)
            if step % cfg["ckpt_every"] == 0:
                metrics = {"step": step, "loss": float(loss.detach())}
                with report_checkpoint(hook, metrics) as ckpt_dir:
                    if rank == 0:
                        torch.save(model.module.state_dict(), ckpt_dir / "model.pt")
                        (ckpt_dir / "meta.json").write_text(json.dumps({"step": step}))
                log_event(cfg["progress"], event="checkpoint", rank=rank, step=step)
        log_event(cfg["progress"], event="done", rank=rank, pid=os.getpid())


def make_trainer(
    config: dict[str, Any],
    storage_path: str,
    name: str,
    num_workers: int = 2,
    max_failures: int = 1,
    train_loop: Callable[[dict[str, Any]], None] = train_func,
) -> Any:
    """A TorchTrainer for ``train_loop`` (:func:`train_func`) on ``num_workers`` CPU workers."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    return TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=False),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    )
