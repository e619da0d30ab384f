"""The hook's one background thread: builds reports and streams them.

Everything that can block or fail lives here, never on the training thread:
the gRPC channel (created inside this thread, after any fork), reconnection
with capped exponential backoff (cut short when the sidecar's socket is new,
see socket_watch.py), a bounded buffer of reports built while the sidecar is
away, and the commands the sidecar pushes back. One session over one stream
is ``stream_session.py``; this module keeps the thread, its loop of sessions
with backoff between them, and the reports built while none is open.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets
import threading
from collections.abc import Callable

import grpc

from trainprobe.hooks.report.socket_watch import SOCKET_WATCH_S, SocketWatch, UnsafeTarget
from trainprobe.hooks.report.stream_session import StreamSession
from trainprobe.proto import (
    PERMANENT_CODES,
    Backoff,
    bearer_metadata,
    probe_pb2,
)

__all__ = ["Reporter"]

log = logging.getLogger("trainprobe.hooks")


class Reporter(StreamSession):
    """Streams reports to a sidecar from a daemon thread.

    ``make_hello`` and ``make_report`` run in this thread. ``on_command``
    handles a pushed command and returns the result to send back, or None.
    ``on_connected`` runs in this thread each time a sidecar accepts a new
    session; it must return at once.
    """

    def __init__(
        self,
        target: str,
        interval_s: float,
        make_hello: Callable[[], probe_pb2.Hello],
        make_report: Callable[[], probe_pb2.Report],
        on_command: Callable[[probe_pb2.Command], probe_pb2.CommandResult | None],
        token: str | None = None,
        max_buffered: int = 64,
        backoff_cap_s: float = 5.0,
        on_connected: Callable[[], None] | None = None,
    ) -> None:
        self.target = target
        self.interval_s = interval_s
        self._make_hello = make_hello
        self._make_report = make_report
        self._on_command = on_command
        self._on_connected_cb = on_connected
        self._metadata = bearer_metadata(token)
        #: Sent in every Hello: what makes a reconnect of an unverified session
        #: (TCP) ours, since a pid and a host are public.
        self._session_secret = secrets.token_bytes(16)
        self._buffer: collections.deque[probe_pb2.Report] = collections.deque(maxlen=max_buffered)
        self._dropped = 0
        self._backoff = Backoff(cap_s=backoff_cap_s)
        self._watch = SocketWatch(target)
        self._closing = False
        #: Set by renew(): end this session with a Goodbye and open a new one at once.
        self._renewing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._next_build = 0.0
        self._outbox: asyncio.Queue[probe_pb2.WorkerMessage | None] | None = None
        self._thread = threading.Thread(target=self._run, name="trainprobe-reporter", daemon=True)
        self._warned = False
        self._build_failed = False
        self.connected = False
        self.sessions = 0
        self.last_error = ""

    # -- called from other threads -------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Send what is buffered and a Goodbye, waiting at most ``timeout_s``."""
        self._closing = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._poke)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def renew(self) -> None:
        """Start a new session (a new Hello: the identity changed). Returns at once."""
        self._renewing = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._poke)

    def report_soon(self) -> None:
        """Build and send a report now, not at the next interval. Returns at once;
        safe from any thread (the training thread calls it after a stall)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(Exception):  # a closed loop: nothing to send to
                loop.call_soon_threadsafe(self._report_now)

    def _report_now(self) -> None:
        # Only while a session is open: between sessions reports are buffered at
        # their interval anyway (and _idle must not be woken for nothing).
        if self._loop is not None and self._outbox is not None and self.connected:
            self._next_build = min(self._next_build, self._loop.time())
            self._outbox.put_nowait(None)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()
        if self._outbox is not None:
            self._outbox.put_nowait(None)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the reporter thread -------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # never let the thread die silently
            log.exception("trainprobe reporter stopped after an unexpected error")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while not self._closing:
            permanent = False
            try:
                await self._session()
            except grpc.aio.AioRpcError as err:
                permanent = err.code() in PERMANENT_CODES
                self._note_failure(f"{err.code().name}: {err.details()}")
            except UnsafeTarget as err:
                permanent = True
                self._note_failure(str(err))
            except (asyncio.TimeoutError, OSError) as err:
                self._note_failure(f"{type(err).__name__}: {err}")
            except Exception as err:  # whatever gRPC raises next, the thread carries on
                log.debug("trainprobe: session failed", exc_info=True)
                self._note_failure(f"{type(err).__name__}: {err}")
            self.connected = False
            if self._closing:
                break
            if self._renewing:
                self._renewing = False
                continue
            if self._watch.note_failure():
                self._backoff.reset()
            await self._idle(
                self._watch.retry_delay(self._backoff.next_delay(permanent), permanent)
            )

    def _note_failure(self, reason: str) -> None:
        self.last_error = reason
        if not self._warned and not self._closing:
            self._warned = True
            log.warning(
                "trainprobe: sidecar at %s not reachable (%s); training continues, "
                "retrying in the background (reported once)",
                self.target,
                reason,
            )

    def _build(self) -> None:
        try:
            report = self._make_report()
        except Exception:
            # A report we cannot build is skipped; the thread and training go on.
            if not self._build_failed:
                self._build_failed = True
                log.exception("trainprobe: could not build a report (reported once)")
            return
        if len(self._buffer) == self._buffer.maxlen:
            self._dropped += 1
        self._buffer.append(report)

    async def _idle(self, delay_s: float) -> None:
        """Wait out a backoff, still building reports so no window is lost.

        Ends early when a new socket file appears (a sidecar restarted); the
        backoff then starts over, so one still starting up is soon tried again.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay_s
        watch = self._watch
        while not self._closing:
            now = loop.time()
            if now >= self._next_build:
                self._build()
                self._next_build = max(self._next_build + self.interval_s, now)
            if now >= deadline:
                return
            if watch.changed():
                self._backoff.reset()
                return
            wake = min(deadline, self._next_build)
            if watch.watching:
                wake = min(wake, now + SOCKET_WATCH_S)
            await self._sleep(wake - now)

    async def _sleep(self, seconds: float) -> None:
        assert self._wake is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
