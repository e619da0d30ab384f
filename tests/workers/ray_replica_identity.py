"""A Ray Train worker (TorchftConfig) that writes what its hook says about its replica.

First with no Manager (Ray Train's replica group), then after
``hook.watch_torchft(manager)`` (the Manager's replica id). Used by
tests/test_ray_torchft.py.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any


def train_func(config: dict[str, Any]) -> None:
    import ray.train
    import torch
    import torchft

    from trainprobe.hooks import LivenessProbeHook

    rank = ray.train.get_context().get_world_rank()

    def seen(source: str, hook: LivenessProbeHook) -> None:
        r = hook._make_hello().replica
        row = {"rank": rank, "source": source, "hook_rank": hook.identity.rank}
        row |= {"replica": r.replica_id, "group_rank": r.group_rank, "group": r.group_world_size}
        with open(config["out"], "a") as fh:
            fh.write(json.dumps(row) + "\n")

    hook = LivenessProbeHook(target="unix:///nonexistent/trainprobe.sock", start=False)
    seen("ray", hook)
    model = torch.nn.Linear(2, 1)
    manager = torchft.Manager(
        pg=torchft.ProcessGroupGloo(timeout=timedelta(seconds=30)),
        min_replica_size=1,
        load_state_dict=model.load_state_dict,
        state_dict=model.state_dict,
        world_size=1,
        rank=0,
        replica_id=f"train_{rank}",
        timeout=timedelta(seconds=30),
    )
    hook.watch_torchft(manager)
    seen("manager", hook)
    hook.close()
    manager.shutdown(wait=False)
