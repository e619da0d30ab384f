"""CUDA timing events, recycled per device, and whether a group runs on CUDA.

Timing a collective on the GPU records one event on the current stream before
it and one after (inside the future's callback, or at the end of a
``collective()`` block); the reporter thread later asks ``event.query()`` and
``elapsed_time``, neither of which waits for the device. torch is imported only
here and only when CUDA timing is actually used.
"""

from __future__ import annotations

import collections
import sys
from typing import Any


class EventPool:
    """Reusable pairs of timing events for one CUDA device.

    The issuing thread takes pairs, the reporter gives them back once read;
    deque pop/append are atomic, so no lock. Creating events is the costly part
    of timing a collective on the GPU, so they are recycled.
    """

    def __init__(self, device_index: int, max_free: int = 1024) -> None:
        self.device_index = device_index
        self._free: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=max_free)

    def take(self) -> tuple[Any, Any, EventPool]:
        try:
            start, end = self._free.pop()
        except IndexError:
            import torch

            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
        return start, end, self

    def give(self, start: Any, end: Any) -> None:
        self._free.append((start, end))


class EventPools:
    """One :class:`EventPool` per device; events are bound to the device they
    are first recorded on."""

    def __init__(self) -> None:
        self._pools: dict[int, EventPool] = {}

    def for_device(self, index: int) -> EventPool:
        pool = self._pools.get(index)
        if pool is None:
            pool = self._pools.setdefault(index, EventPool(index))
        return pool

    def take_current(self) -> tuple[Any, Any, EventPool]:
        """A pair for the calling thread's current device."""
        import torch

        return self.for_device(torch.cuda.current_device()).take()


def cuda_in_use() -> bool:
    """Whether this process has initialized CUDA (never initializes it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def group_runs_on_cuda(group: Any) -> bool:
    """Whether collectives on ``group`` go through NCCL (timed with events).

    ``group`` is None (world), a ProcessGroup, or a label (host-timed).
    """
    if isinstance(group, str) or not cuda_in_use():
        return False
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return False
    try:
        if not dist.is_initialized():
            return False
        # "nccl", or a mixed "cpu:gloo,cuda:nccl".
        return "nccl" in str(dist.get_backend(group)).lower()
    except Exception:
        return False
