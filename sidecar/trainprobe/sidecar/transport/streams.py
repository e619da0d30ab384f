"""What every stream handler shares: unparsable messages as values, and the
loop that writes a stream's outbox while its reader runs (Relay streams)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Malformed:
    """Stands in for a message that did not parse."""

    type_name: str
    size: int
    error: str


def safe_parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as err:
            return Malformed(cls.__name__, len(data), str(err) or type(err).__name__)

    return parse


async def pump(
    write: Callable[[Any], Awaitable[None]], reader: Awaitable[T], outbox: asyncio.Queue[Any]
) -> T:
    """``write`` what arrives in ``outbox`` until ``reader`` is done; its result."""
    task = asyncio.ensure_future(reader)
    getter: asyncio.Future[Any] | None = None
    try:
        while True:
            getter = asyncio.ensure_future(outbox.get())
            done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                await write(getter.result())
            else:
                getter.cancel()
            if task in done:
                return task.result()
    finally:  # also when the handler itself is cancelled (the peer went away)
        task.cancel()
        if getter is not None:
            getter.cancel()
