"""A sidecar on its own event loop in a background thread (embedding, tests, Ray)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from trainprobe.sidecar.act.killers import Killer, KillerFactory
from trainprobe.sidecar.config.settings import Settings
from trainprobe.sidecar.server import Sidecar

__all__ = ["SidecarThread"]


class SidecarThread:
    """A sidecar on its own loop in a background thread (tests, benchmarks, Ray)."""

    def __init__(
        self,
        settings: Settings,
        killer: Killer | None = None,
        killer_factory: KillerFactory | None = None,
        sidecar_id: str = "",
    ) -> None:
        self.settings = settings
        self._killer = killer
        self._killer_factory = killer_factory
        self._sidecar_id = sidecar_id
        self.sidecar: Sidecar | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="trainprobe-sidecar", daemon=True)

    def start(self, timeout_s: float = 10.0) -> SidecarThread:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError("sidecar did not start in time")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        async def main() -> None:
            try:
                self.loop = asyncio.get_running_loop()
                self.sidecar = Sidecar(
                    self.settings,
                    killer=self._killer,
                    killer_factory=self._killer_factory,
                    sidecar_id=self._sidecar_id,
                )
                await self.sidecar.start()
            except BaseException as err:
                self._error = err
                self._ready.set()
                return
            self._ready.set()
            await self.sidecar.wait_stopped()
            await self.sidecar.stop()

        asyncio.run(main())

    def call(self, fn: Callable[[], Any], timeout_s: float = 10.0) -> Any:
        """Run ``fn`` on the sidecar's loop and return its result."""
        assert self.loop is not None

        async def wrapper() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout_s)

    def call_async(self, fn: Callable[[], Any], timeout_s: float = 10.0) -> Any:
        """Await the coroutine ``fn()`` on the sidecar's loop and return its result."""
        assert self.loop is not None

        async def wrapper() -> Any:
            return await fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout_s)

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.loop is not None and self.sidecar is not None:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.sidecar.request_stop)
        self._thread.join(timeout_s)

    def __enter__(self) -> SidecarThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
