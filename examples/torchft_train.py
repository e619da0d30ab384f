"""One replica group of a replicated (torchft) job, with trainprobe watching it.

Run one of these per replica group (each its own torchrun, or a plain process
for a group of one), plus one torchft lighthouse for the job:

    torchft_lighthouse --min_replicas 1 --join_timeout_ms 10000 --heartbeat_timeout_ms 1000 &
    trainprobe-sidecar &                                  # once per node
    export TORCHFT_LIGHTHOUSE=http://localhost:29510 TRAINPROBE_JOB_ID=my-run
    for r in 0 1; do
      torchrun --nproc-per-node 1 --master-port $((29600 + r)) --max-restarts 3 \\
          examples/torchft_train.py --replica-id train_$r --replicas 2 &
    done

A replica that hangs is evicted by the sidecar (its torchrun restarts it,
and it fetches live state from a survivor), while the other replicas go on
without restarting. Without torchrun (``--own-store``) the script hosts its
replica group's TCPStore itself; tests/test_torchft_e2e.py runs it that way,
with faults injected into one replica (``--fault``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torchft

from trainprobe.hooks import LivenessProbeHook
from trainprobe.hooks.torchft import DistributedDataParallel

FAULTS = ("none", "sleep", "stop", "kill9", "lock", "gil", "stall8", "checkpoint", "eval")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replica-id", default=os.environ.get("REPLICA_ID", "train_0"))
    p.add_argument("--replicas", type=int, default=2, help="replica groups in the job")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-s", type=float, default=0.05, help="pace: seconds of 'compute' a step")
    p.add_argument("--own-store", action="store_true", help="host this group's TCPStore")
    p.add_argument("--progress", type=Path, help="append one JSON line per committed step")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument(
        "--fault-at",
        type=int,
        default=20,
        help="committed step the fault starts at, at the "
        "first step from there whose quorum has another replica",
    )
    p.add_argument("--fault-marker", type=Path, help="fault only while this file is absent")
    p.add_argument("--interval-ms", type=int, default=250, help="the hook's report interval")
    p.add_argument(
        "--stop-file", type=Path, help="once it holds a step number, train up to that step only"
    )
    return p.parse_args()


def emit(path: Path | None, **row: object) -> None:
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps({"t": time.time(), "pid": os.getpid(), **row}) + "\n")


def inject(fault: str, hook: LivenessProbeHook) -> None:
    """The fault, on the training thread, in the middle of a step."""
    if fault == "sleep":  # ambiguous: it might wake up
        time.sleep(3600)
    elif fault == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif fault == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "lock":  # a deadlock: two locks taken in opposite order
        a, b = threading.Lock(), threading.Lock()
        b.acquire()
        threading.Thread(target=lambda: (a.acquire(), b.acquire()), daemon=True).start()
        time.sleep(0.1)
        a.acquire()
    elif fault == "gil":  # a C call that holds the GIL (a huge regex backtrack)
        import re

        re.match(r"(a+)+$", "a" * 64 + "b")
    elif fault == "stall8":  # healthy: an 8 s stall that ends by itself
        time.sleep(8)
    elif fault == "checkpoint":  # healthy: a long declared checkpoint
        with hook.phase("checkpoint", timeout_s=120):
            time.sleep(15)


def main() -> None:
    args = parse()
    group_rank = int(os.environ.get("RANK", "0"))
    group_world = int(os.environ.get("WORLD_SIZE", "1"))
    store = None
    if args.own_store:
        store = dist.TCPStore(
            os.environ.get("MASTER_ADDR", "127.0.0.1"),
            int(os.environ["MASTER_PORT"]),
            is_master=group_rank == 0,
            wait_for_workers=False,
        )
    torch.manual_seed(0)  # every replica starts alike; a replacement heals from a peer
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def state_dict() -> dict[str, object]:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def load_state_dict(sd: dict[str, object]) -> None:
        model.load_state_dict(sd["model"])  # type: ignore[arg-type]
        opt.load_state_dict(sd["optim"])  # type: ignore[arg-type]

    manager = torchft.Manager(
        pg=torchft.ProcessGroupGloo(timeout=timedelta(seconds=30)),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=args.replica_id,
        rank=group_rank,
        world_size=group_world,
        timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=60),
    )
    # The replica's identity from its first Hello on (hook.watch_torchft(manager) also works).
    hook = LivenessProbeHook(interval_ms=args.interval_ms, torchft=manager)
    hook.watch_torchft(manager, num_replicas=args.replicas)
    ddp = DistributedDataParallel(manager, model)
    optimizer = torchft.Optimizer(manager, opt)
    faulty = args.fault != "none" and not (args.fault_marker and args.fault_marker.exists())
    emit(args.progress, event="start", replica=args.replica_id)
    last = args.steps
    while manager.current_step() < last:
        step = manager.current_step()
        if args.stop_file is not None and args.stop_file.exists():
            text = args.stop_file.read_text().strip()
            last = min(last, int(text)) if text.isdigit() else last
        optimizer.zero_grad()  # starts the quorum for this step
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 8, generator=g)
        time.sleep(args.step_s)
        # The fault comes once another replica trains with this one (the quorum of
        # this step has both), so that replica waits for this one.
        if faulty and step >= args.fault_at and manager.num_participants() >= 2:
            faulty = False
            if args.fault_marker is not None:
                args.fault_marker.touch()
            emit(args.progress, event="fault", replica=args.replica_id, fault=args.fault, step=step)
            inject(args.fault, hook)
        loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        loss.backward()
        optimizer.step()  # commits only if every replica of the quorum did its part
        if manager.current_step() > step:
            hook.on_step_end(manager.current_step())
            emit(args.progress, event="step", replica=args.replica_id, step=manager.current_step())
            if args.fault == "eval" and step % 25 == 0:  # healthy: an eval on every replica
                with hook.phase("eval", timeout_s=120), torch.no_grad():
                    time.sleep(5)
    params = [float(v) for p in model.parameters() for v in p.detach().flatten()]
    emit(args.progress, event="done", replica=args.replica_id, params=params)
    hook.close()
    manager.shutdown(wait=False)
    del store


if __name__ == "__main__":
    main()
