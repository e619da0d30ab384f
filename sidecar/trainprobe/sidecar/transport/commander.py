"""Commands to workers: one outbound sink per live session, and pending results.

Connect streams and relayed sessions alike: a session's sink is its stream's
:class:`StreamSink`, or its relay route (see relay/upstream.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.session.model import WorkerKey

log = logging.getLogger("trainprobe.sidecar")


class CommandSink(Protocol):
    """Where a session's commands go: its Connect stream's sink, or a relay."""

    def put_nowait(self, command: probe_pb2.Command) -> None: ...


class StreamSink:
    """A Connect stream's commands, written in order by a task that lives only
    while some are waiting.

    Commands are rare (stack dumps, aborts, notices), so nothing waits on a
    stream between them: a session costs its reading coroutine and this, not a
    queue and two more tasks (about 5 KiB each; bench/bench_session_cost.py).
    gRPC allows one write pending beside the handler's read.
    """

    __slots__ = ("_backlog", "_task", "_write")

    def __init__(self, write: Callable[[probe_pb2.Command], Awaitable[None]]) -> None:
        self._write = write
        self._backlog: deque[probe_pb2.Command] | None = None
        self._task: asyncio.Task[None] | None = None

    def put_nowait(self, command: probe_pb2.Command) -> None:
        if self._backlog is None:
            self._backlog = deque()
        self._backlog.append(command)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._backlog:
                await self._write(self._backlog.popleft())
        except Exception as err:  # the stream ended under it: the result times out
            log.debug("a command was not written: %s", err or type(err).__name__)
            self._backlog = None
        finally:
            self._task = None

    def close(self) -> None:
        """The stream ended: what was not written never will be."""
        self._backlog = None
        if self._task is not None:
            self._task.cancel()


class Commander:
    """Outbound command queues per live session and their pending results."""

    def __init__(self) -> None:
        self._queues: dict[WorkerKey, tuple[int, CommandSink]] = {}
        #: Command id -> (the session it was sent to, its result).
        self._pending: dict[int, tuple[WorkerKey, asyncio.Future[probe_pb2.CommandResult]]] = {}
        self._ids = itertools.count(1)

    def attach(self, key: WorkerKey, generation: int, sink: CommandSink) -> None:
        """Route the session's commands to ``sink``."""
        self._queues[key] = (generation, sink)

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
