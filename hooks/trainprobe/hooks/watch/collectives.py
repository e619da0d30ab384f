"""The collective-accounting half of the hook's API, and ``hook.collective()``.

:class:`CollectiveMethods` is mixed into
:class:`~trainprobe.hooks.liveness.LivenessProbeHook`: it owns the per-group
ledger (:mod:`trainprobe.hooks.watch.sync`), the CUDA event pools
(:mod:`trainprobe.hooks.watch.cuda_events`) and the GPU memory monitor
(:mod:`trainprobe.hooks.watch.gpu`), and adds their figures to each report.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from trainprobe.hooks.watch import ddp, notices
from trainprobe.hooks.watch.cuda_events import EventPools, cuda_in_use, group_runs_on_cuda
from trainprobe.hooks.watch.gpu import GpuMonitor
from trainprobe.hooks.watch.sync import (
    GroupLedger,
    Record,
    StepSource,
    SyncLedger,
    sync_stats_pb,
)
from trainprobe.proto import probe_pb2

log = logging.getLogger("trainprobe.hooks")


class Collective:
    """``with hook.collective(name, group):`` around a collective user code issues.

    Counts it in its group's sequence like a DDP bucket. On CUDA it records
    an event on the current stream at entry and at exit; a blocking
    ``torch.distributed`` call makes the current stream wait for the
    collective, so the exit event completes when the collective does, and the
    reporter reads it later without a host-device sync. Never raises.
    """

    __slots__ = ("_ledger", "_nbytes", "_op", "_pools", "_rec")

    def __init__(self, ledger: GroupLedger, op: str, nbytes: int, pools: Any | None) -> None:
        self._ledger, self._op, self._nbytes, self._pools = ledger, op, nbytes, pools
        self._rec: Record | None = None

    def __enter__(self) -> Collective:
        try:
            events = self._pools.take_current() if self._pools is not None else None
            self._rec = self._ledger.issue(self._op, self._nbytes, events)
            if events is not None:
                events[2].record(events[0])
        except Exception:
            self._rec = None
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        ddp.record_end(self._rec)
        if isinstance(exc, Exception):
            notices.explain(exc)  # a peer trainprobe killed: the error says so


class CollectiveMethods:
    """watch_ddp, wrap_comm_hook and collective, and the sync/GPU collectors."""

    _gpu: GpuMonitor
    _sync: SyncLedger
    _event_pools: EventPools

    def _init_collectives(self, steps: StepSource, cuda_device: int | None) -> None:
        if cuda_device is None and cuda_in_use():
            # Only the training thread knows its current device; remember it.
            cuda_device = sys.modules["torch"].cuda.current_device()
        self._gpu = GpuMonitor(cuda_device)
        self._sync = SyncLedger(steps)
        self._event_pools = EventPools()

    def watch_ddp(
        self, model: object, comm_hook: ddp.CommHook | None = None, state: object = None
    ) -> bool:
        """Time every gradient bucket of a DDP model and number it in its group.

        Registers a comm hook that does exactly DDP's default allreduce
        (gradients stay bit-identical) or, given ``comm_hook``, wraps that hook
        and registers it with ``state``. DDP allows one hook per model: if one
        is already registered this logs why nothing can be measured and
        returns False; training is never affected. Call before the first
        backward. Returns True when the model is watched.
        """
        try:
            watched = ddp.watch_ddp(self._sync, self._event_pools, model, comm_hook, state)
            if watched and self._gpu.device is None:
                self._gpu.device = ddp.model_device(model)
            return watched
        except Exception:
            log.warning("trainprobe: watch_ddp failed; sync not measured", exc_info=True)
            return False

    def wrap_comm_hook(self, comm_hook: ddp.CommHook, group: object = None) -> ddp.CommHook:
        """``comm_hook``, timed and counted in ``group`` (None = world).

        For frameworks that register the DDP comm hook themselves; otherwise
        prefer :meth:`watch_ddp`.
        """
        return ddp.wrap_comm_hook(self._sync.group(group), comm_hook, self._event_pools)

    def collective(self, name: str, group: object = None, nbytes: int = 0) -> Collective:
        """``with hook.collective("name", group):`` around a collective issued outside DDP.

        It gets the next sequence number of ``group`` (None = the world group,
        a ProcessGroup, or a label), and its latency and in-flight age are
        reported like a DDP bucket's. On NCCL groups it is timed with CUDA
        events, without synchronizing. Never raises.
        """
        try:
            size = max(0, int(nbytes))
            ledger = self._sync.group(group)
            if ledger.on_cuda is None and cuda_in_use():
                ledger.on_cuda = group_runs_on_cuda(group)
            pools = self._event_pools if ledger.on_cuda else None
        except Exception:
            size, ledger, pools = 0, self._sync.group("other"), None
        return Collective(ledger, str(name), size, pools)

    def _collect_sync(self, report: probe_pb2.Report) -> None:
        window = self._sync.collect()
        if window is not None:
            report.sync.CopyFrom(sync_stats_pb(window))
