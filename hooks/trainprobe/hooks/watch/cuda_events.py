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
    """Reusable pairs of timing events for one CUDA device, and a cheap way to
    record them on the current stream.

    The issuing thread takes pairs, the reporter gives them back once read;
    deque pop/append are atomic, so no lock. ``torch.cuda.Event.record()``
    without a stream builds a new ``torch.cuda.Stream`` object for the current
    stream on every call, which dominates the cost of timing a bucket; the
    stream objects are cached here instead, keyed by torch's own current-stream
    triple (stream id, device, type).
    """

    def __init__(self, device_index: int, max_free: int = 1024) -> None:
        import torch

        self.device_index = device_index
        self._free: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=max_free)
        self._event = torch.cuda.Event
        self._stream = torch.cuda.Stream
        self._current = getattr(torch._C, "_cuda_getCurrentStream", None)
        self._streams: dict[tuple[int, int, int], Any] = {}

    def take(self) -> tuple[Any, Any, EventPool]:
        try:
            start, end = self._free.pop()
        except IndexError:
            start = self._event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = self._event(enable_timing=True)  # type: ignore[no-untyped-call]
        return start, end, self

    def give(self, start: Any, end: Any) -> None:
        self._free.append((start, end))

    def record(self, event: Any) -> None:
        """Record ``event`` on this device's current stream (of the calling thread)."""
        if self._current is None:
            event.record()
            return
        key = self._current(self.device_index)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._stream(  # type: ignore[no-untyped-call]
                stream_id=key[0], device_index=key[1], device_type=key[2]
            )
            if len(self._streams) < 1024:  # streams come from small fixed pools
                self._streams[key] = stream
        event.record(stream)


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
