"""The replica-group half of the hook's API: ``hook.watch_torchft()``.

:class:`ReplicaMethods` is mixed into
:class:`~trainprobe.hooks.liveness.LivenessProbeHook`: it learns this
process's replica group (from a torchft ``Manager``, from Ray Train's
``TorchftConfig`` or from ``trainprobe run --replicas``) and, where the
identity was only replica-local, the job-wide rank torchft implies. The
torchft and replicated modules are imported only when called.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from trainprobe.hooks.report.identity import Identity, RayIds, resolve_identity
from trainprobe.hooks.report.messages import Collector
from trainprobe.hooks.watch.sync import SyncLedger

if TYPE_CHECKING:
    from trainprobe.hooks.report.reporter import Reporter

__all__ = ["ReplicaMethods"]

log = logging.getLogger("trainprobe.hooks")


class ReplicaMethods:
    """watch_torchft, and the replica group a launcher or Ray Train gives."""

    #: The torchft Manager's view of this process's replica (watch_torchft).
    _replica: Any
    _collectors: list[Collector]
    _reporter: Reporter | None
    _args: tuple[str | None, int | None, int | None, int | None]
    _ray: tuple[RayIds, dict[str, int]]
    _sync: SyncLedger
    identity: Identity

    def watch_torchft(self, manager: Any, num_replicas: int | None = None) -> bool:
        """Report this process's replica group from a torchft ``Manager``.

        Hello then carries the replica id, group rank and group world size, and
        every report the quorum id, committed step and what the training thread
        waits for inside torchft (quorum, replicated allreduce, commit). The
        sidecar judges the job as replica groups: a replica that stopped
        stepping while the others wait for it is the culprit, the waiting ones
        are never killed, and its action is to evict the culprit group.

        The job-wide rank is torchft's own (the replica id's trailing digits x
        group world size + group rank) when the identity did not already give
        a job-wide one (Ray Train does; one torchrun per replica group does not);
        ``num_replicas`` sets the job-wide world size in that case (default: the
        Manager's ``min_replica_size``). Set ``TRAINPROBE_JOB_ID`` alike in every
        replica so they are one job. Use :class:`trainprobe.hooks.torchft.
        DistributedDataParallel` (torchft's wrapper with a comm hook whose error
        path works) to also count the replicated allreduce. Never raises.
        """
        try:
            from trainprobe.hooks import torchft as ft

            before = self._replica
            watch = ft.install(manager, self._sync.group(ft.GROUP))
            self._replica = watch
            if not isinstance(before, ft.ReplicaWatch):
                self._collectors.append(watch.collect)
            self._adopt_replica_rank(watch, manager, num_replicas)
            moved = before is not None and before.replica_id != watch.replica_id
            if moved and self._reporter is not None:
                self._reporter.renew()  # Ray Train's replica group, now the Manager's id
            return True
        except Exception:
            log.warning("trainprobe: watch_torchft failed; no replica reported", exc_info=True)
            return False

    def _ray_replica_group(self) -> None:
        """Under Ray Train with TorchftConfig: the replica group from Ray Train itself;
        under a launcher of replica groups (``trainprobe run``), from its env."""
        try:
            from trainprobe.hooks.replica.replicate import launcher_replica_group
            from trainprobe.hooks.report.replica_group import ray_train_replica_group

            if self._ray[1]:
                self._replica = ray_train_replica_group(self._ray[1])
            else:
                self._replica = launcher_replica_group()
        except Exception:
            log.debug("trainprobe: no Ray Train replica group", exc_info=True)

    def _adopt_replica_rank(self, watch: Any, manager: Any, num_replicas: int | None) -> None:
        from trainprobe.hooks.torchft import replica_rank

        job_id, rank, world_size, local_rank = self._args
        ident = self.identity
        if rank is not None or ident.world_size > watch.group_world_size:
            return  # the identity is already job-wide (Ray Train, or given)
        global_rank = replica_rank(watch.replica_id, watch.group_rank, watch.group_world_size)
        if global_rank is None:
            log.warning(
                "trainprobe: torchft replica id %r has no trailing number: give the hook a "
                "job-wide rank (TRAINPROBE_RANK) so replicas do not share ranks",
                watch.replica_id,
            )
            return
        replicas = num_replicas or int(getattr(manager, "_min_replica_size", 1) or 1)
        world = max(world_size or 0, replicas * watch.group_world_size, global_rank + 1)
        local = ident.local_rank if local_rank is None else local_rank
        if (global_rank, world) == (ident.rank, ident.world_size):
            return
        self._args = (job_id, global_rank, world, local)
        self.identity = resolve_identity(*self._args, ray_info=self._ray)
        if self._reporter is not None:  # None: an inert hook (a bad target)
            self._reporter.renew()  # a new session, under the job-wide rank
