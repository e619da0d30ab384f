"""Who this training process is: job, rank, host, pid and Ray ids.

Explicit arguments win; then the environment (torchrun's ``RANK`` and friends,
``TRAINPROBE_JOB_ID``); then an initialized ``torch.distributed``; then Ray's
runtime context when running inside Ray. Identity is resolved again in the
reporter thread at each connection attempt until a sidecar accepts it, so a
hook created before ``init_process_group`` still ends up with the right rank.

Ray ids and Ray Train ranks are read once, by :func:`ray_ids` in the thread
that creates the hook (inside ``train_func``, where Ray Train's context is
sure to exist), and handed to later resolutions as ``ray_info``.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field

# Declared once, in the sidecar's pure core, for both ends: what the Hello's
# RayIdentity carries and the sidecar kills by.
from trainprobe.proto.wire import RayIds

__all__ = ["Identity", "RayCapture", "RayIds", "ray_ids", "resolve_identity"]


@dataclass(frozen=True)
class Identity:
    job_id: str
    rank: int
    local_rank: int
    world_size: int
    host: str
    pid: int
    ray: RayIds = field(default_factory=RayIds)
    #: True when the rank was guessed (no argument, env or process group).
    rank_guessed: bool = False


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                continue
    return None


def _dist_rank_world() -> tuple[int | None, int | None]:
    # Never import torch here: the hook must not pay for it when unused.
    dist_mod = sys.modules.get("torch.distributed")
    if dist_mod is None:
        return None, None
    try:
        if dist_mod.is_available() and dist_mod.is_initialized():
            return int(dist_mod.get_rank()), int(dist_mod.get_world_size())
    except Exception:
        pass
    return None, None


def ray_ids() -> tuple[RayIds, dict[str, int]]:
    """Ray ids of this process and, inside a Ray Train worker, its ranks.

    Returns empty ids outside Ray. Only reads ``ray`` if it is already
    imported, so a plain torchrun job never imports it.
    """
    ray_mod = sys.modules.get("ray")
    ranks: dict[str, int] = {}
    if ray_mod is None:
        return RayIds(), ranks
    try:
        if not ray_mod.is_initialized():
            return RayIds(), ranks
        ctx = ray_mod.get_runtime_context()
        ids = RayIds(
            job_id=str(ctx.get_job_id() or ""),
            node_id=str(ctx.get_node_id() or ""),
            actor_id=str(ctx.get_actor_id() or ""),
            worker_id=str(ctx.get_worker_id() or ""),
        )
    except Exception:
        return RayIds(), ranks
    train = sys.modules.get("ray.train")
    if train is not None:
        try:
            tctx = train.get_context()
            ranks = {
                "rank": int(tctx.get_world_rank()),
                "local_rank": int(tctx.get_local_rank()),
                "world_size": int(tctx.get_world_size()),
            }
            run_name = ""
            for getter in ("get_experiment_name", "get_run_name", "get_trial_name"):
                fn = getattr(tctx, getter, None)
                if fn is not None:
                    try:
                        run_name = str(fn() or "")
                    except Exception:
                        run_name = ""
                    if run_name:
                        break
            ids = RayIds(ids.job_id, ids.node_id, ids.actor_id, ids.worker_id, run_name)
        except Exception:
            ranks = {}
    return ids, ranks


#: What :func:`ray_ids` returns: the ids, and the Ray Train ranks if any.
RayCapture = tuple[RayIds, dict[str, int]]


def resolve_identity(
    job_id: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    ray_info: RayCapture | None = None,
) -> Identity:
    """Resolve the identity from arguments, environment, torch and Ray.

    ``ray_info`` is a :func:`ray_ids` result captured earlier; when None the
    Ray runtime context is read now.
    """
    ray, ray_ranks = ray_info if ray_info is not None else ray_ids()
    dist_rank, dist_world = _dist_rank_world()
    guessed = False
    explicit = rank is not None
    if rank is None:
        rank = _env_int("RANK", "TRAINPROBE_RANK")
        if rank is None:
            rank = ray_ranks.get("rank", dist_rank)
        if rank is None:
            rank, guessed = 0, True
    if world_size is None:
        world_size = _env_int("WORLD_SIZE", "TRAINPROBE_WORLD_SIZE")
        if world_size is None:
            world_size = ray_ranks.get("world_size", dist_world)
        if world_size is None:
            world_size = 1
    if local_rank is None:
        local_rank = _env_int("LOCAL_RANK", "TRAINPROBE_LOCAL_RANK")
        if local_rank is None:
            local_rank = ray_ranks.get("local_rank", 0 if guessed else rank)
    if not ray_ranks and not explicit:
        rank, world_size = _replica_group_ranks(rank, world_size)
    if not job_id:
        job_id = os.environ.get("TRAINPROBE_JOB_ID") or _default_job_id(ray)
    return Identity(
        job_id=job_id,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        # TRAINPROBE_HOST: the node or pod name people know the host by.
        host=os.environ.get("TRAINPROBE_HOST", "").strip() or socket.gethostname(),
        pid=os.getpid(),
        ray=ray,
        rank_guessed=guessed,
    )


def _replica_group_ranks(rank: int, world_size: int) -> tuple[int, int]:
    """Job-wide rank and world size of a rank of a torchft replica group.

    A launcher of replica groups (``trainprobe run``, torchft's torchx) gives
    each group torchrun's ``RANK``/``WORLD_SIZE`` within the group, and
    ``REPLICA_GROUP_ID``/``NUM_REPLICA_GROUPS`` with ``TORCHFT_LIGHTHOUSE``. The
    job-wide rank is torchft's own (group index x group size + group rank), so
    the first Hello already names the rank ``watch_torchft`` would adopt.
    """
    group = _env_int("REPLICA_GROUP_ID")
    if group is None or not os.environ.get("TORCHFT_LIGHTHOUSE"):
        return rank, world_size
    groups = max(group + 1, _env_int("NUM_REPLICA_GROUPS") or 1)
    return group * world_size + rank, groups * world_size


def _default_job_id(ray: RayIds) -> str:
    if ray.run_name:
        return ray.run_name
    if ray.job_id:
        return f"ray-{ray.job_id}"
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return run_id
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        # Every rank of a torch.distributed job shares its rendezvous address.
        return f"{addr}:{port}"
    return "default"
