"""Device memory of the training process, read in the reporter thread only.

Two sources:

- torch's caching allocator (allocated, reserved, peak bytes): host-side
  counters, read with ``torch.cuda.memory_stats``, which never synchronizes
  with the device;
- NVML (``pynvml`` from nvidia-ml-py): the device's used and total memory and
  this process's share, sampled at most once a second because NVML calls take
  the driver's lock. NVML is initialized once and handles are cached.

Nothing is reported, and CUDA is never initialized, until the training code
itself has initialized CUDA. Without NVML only the allocator figures are
sent, with one debug line. A failure to read is logged once per kind.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from trainprobe.hooks.watch.cuda_events import cuda_in_use
from trainprobe.proto import probe_pb2

log = logging.getLogger("trainprobe.hooks")


def _nvml_uuid(torch: Any, index: int) -> str:
    """NVML's UUID ("GPU-...") of CUDA device ``index`` of this process."""
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    # torch prints the bare UUID; NVML prefixes GPU- (or MIG- for MIG slices).
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


class GpuMonitor:
    """Fills ``Report.gpu_memory`` and the GPU identity for one process.

    Args:
        device: the CUDA device index the training uses, if known. Otherwise
            it is learned from ``watch_ddp``, else taken to be the one device
            the allocator has memory on, else ``LOCAL_RANK``, else 0.
        nvml_interval_s: the least time between two NVML samples.
    """

    def __init__(self, device: int | None = None, nvml_interval_s: float = 1.0) -> None:
        self.device = device
        self.nvml_interval_s = nvml_interval_s
        self._nvml: Any = None
        self._nvml_failed = False
        self._handles: dict[str, Any] = {}
        self._last_nvml_at = float("-inf")
        self._logged: set[str] = set()
        self._pid = os.getpid()

    def _once(self, key: str, message: str, *args: object, exc_info: bool = False) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.debug(message, *args, exc_info=exc_info)

    # -- device ------------------------------------------------------------------

    def _torch(self) -> Any | None:
        """torch, if this process has initialized CUDA; else None."""
        if not cuda_in_use():
            return None  # a CPU process, or CUDA not used yet: silently absent
        return sys.modules["torch"]

    def resolve_device(self, torch: Any) -> int:
        if self.device is not None:
            return self.device
        count = torch.cuda.device_count()
        used = [i for i in range(count) if torch.cuda.memory_reserved(i) > 0]
        if len(used) == 1:
            self.device = used[0]  # settled: one process, one device
            return used[0]
        try:
            local = int(os.environ.get("LOCAL_RANK", "0"))
        except ValueError:
            local = 0
        return local if 0 <= local < count else 0

    def identity(self) -> tuple[str, int]:
        """(NVML UUID, device index) for Hello, or ("", -1) while unknown."""
        torch = self._torch()
        if torch is None:
            return "", -1
        try:
            index = self.resolve_device(torch)
            return _nvml_uuid(torch, index), index
        except Exception:
            self._once("uuid", "trainprobe: cannot read the GPU's UUID", exc_info=True)
            return "", -1

    # -- NVML --------------------------------------------------------------------

    def _nvml_module(self) -> Any | None:
        if self._nvml is not None or self._nvml_failed:
            return self._nvml
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as err:
            self._nvml_failed = True
            self._once("nvml", "trainprobe: NVML unavailable (%s); allocator figures only", err)
            return None
        self._nvml = pynvml
        return pynvml

    def _handle(self, nvml: Any, uuid: str) -> Any:
        handle = self._handles.get(uuid)
        if handle is None:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            self._handles[uuid] = handle
        return handle

    def _sample_nvml(self, g: probe_pb2.GpuMemory, uuid: str) -> None:
        now = time.monotonic()
        if now - self._last_nvml_at < self.nvml_interval_s:
            return
        nvml = self._nvml_module()
        if nvml is None:
            return
        self._last_nvml_at = now
        try:
            handle = self._handle(nvml, uuid)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception as err:
            self._once("nvml-read", "trainprobe: NVML read failed for %s: %s", uuid, err)
            return
        mine = next((p for p in procs if p.pid == self._pid), None)
        used = getattr(mine, "usedGpuMemory", None) if mine is not None else None
        g.has_nvml = True
        g.device_used_bytes = int(mem.used)
        g.device_total_bytes = int(mem.total)
        # NVML reports None when it cannot attribute memory per process.
        g.process_used_bytes = int(used) if isinstance(used, int) else 0

    # -- the collector -------------------------------------------------------------

    def collect(self, report: probe_pb2.Report) -> None:
        """Fill ``report.gpu_memory``; leave it absent without CUDA."""
        torch = self._torch()
        if torch is None:
            return
        index = self.resolve_device(torch)
        stats = torch.cuda.memory_stats(index)
        g = report.gpu_memory
        g.device_index = index
        g.allocated_bytes = int(stats.get("allocated_bytes.all.current", 0))
        g.reserved_bytes = int(stats.get("reserved_bytes.all.current", 0))
        g.peak_allocated_bytes = int(stats.get("allocated_bytes.all.peak", 0))
        try:
            g.device_uuid = _nvml_uuid(torch, index)
        except Exception:
            self._once("uuid", "trainprobe: cannot read the GPU's UUID", exc_info=True)
            return
        self._sample_nvml(g, g.device_uuid)
