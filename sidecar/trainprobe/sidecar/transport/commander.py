"""Commands to workers: one outbound sink per live session, and pending results.

Connect streams and relayed sessions alike: a session's sink is its stream's
queue, or its relay route (see relay_upstream.py).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Protocol

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.model import WorkerKey


class CommandSink(Protocol):
    """Where a session's commands go: its Connect stream's queue, or a relay."""

    def put_nowait(self, command: probe_pb2.Command) -> None: ...


class Commander:
    """Outbound command queues per live session and their pending results."""

    def __init__(self) -> None:
        self._queues: dict[WorkerKey, tuple[int, CommandSink]] = {}
        #: Command id -> (the session it was sent to, its result).
        self._pending: dict[int, tuple[WorkerKey, asyncio.Future[probe_pb2.CommandResult]]] = {}
        self._ids = itertools.count(1)

    def attach(self, key: WorkerKey, generation: int, sink: CommandSink | None = None) -> Any:
        """Route the session's commands to ``sink`` (default: a new queue, returned)."""
        out: CommandSink = asyncio.Queue() if sink is None else sink
        self._queues[key] = (generation, out)
        return out

    def detach(self, key: WorkerKey, generation: int) -> None:
        entry = self._queues.get(key)
        if entry is not None and entry[0] == generation:
            del self._queues[key]

    def connected(self, key: WorkerKey) -> bool:
        return key in self._queues

    async def request(
        self, key: WorkerKey, timeout_s: float, **kind: Any
    ) -> probe_pb2.CommandResult | None:
        """Send a command (``dump_stacks=...`` or ``abort=...``) and await its result.

        Returns None if the worker is not connected or does not answer in time
        (a thread holding the GIL in C code cannot answer).
        """
        entry = self._queues.get(key)
        if entry is None:
            return None
        cid = next(self._ids)
        fut: asyncio.Future[probe_pb2.CommandResult] = asyncio.get_running_loop().create_future()
        self._pending[cid] = (key, fut)
        entry[1].put_nowait(probe_pb2.Command(id=cid, **kind))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            self._pending.pop(cid, None)

    def resolve(self, result: probe_pb2.CommandResult, key: WorkerKey) -> None:
        """A result from session ``key``: it answers only a command sent to that
        session (another session cannot forge a rank's stacks or its abort)."""
        entry = self._pending.get(result.command_id)
        if entry is None or entry[0] != key:
            return
        fut = entry[1]
        if not fut.done():
            fut.set_result(result)
