"""Fire-and-forget tasks that stay referenced until they finish.

The event loop keeps only weak references to tasks, so a task nobody holds
can be garbage-collected mid-flight; every adapter that spawns one holds it
in a :class:`TaskSet` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


class TaskSet:
    """A set of running tasks; each leaves the set when it is done."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def wait(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the tasks running now."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
