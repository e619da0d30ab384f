"""One session with the sidecar over one ``Connect`` stream, as the reporter
thread runs it.

A session opens a fresh channel (never the process-wide subchannel pool, so a
restarted sidecar is reached at once), fetches the kernel's ticket for this
pid, sends the Hello, then the reports buffered while no session was open,
then a report each interval; commands pushed back are handled off the loop
and their results queued for the same stream. It ends with a Goodbye when the
hook closes or its identity changes (:meth:`Reporter.renew
<trainprobe.hooks.report.reporter.Reporter.renew>`), or with the stream's error.
When the sidecar ends the call while a write is in flight, grpc reports only
"INTERNAL"; :func:`_ended_error` recovers the status the sidecar sent.

:class:`StreamSession` is the session half of
:class:`~trainprobe.hooks.report.reporter.Reporter`, which holds the state both
halves share (the buffer, the flags, the callbacks) and runs sessions in a
loop with backoff between them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable

import grpc

from trainprobe.hooks.report.socket_watch import SocketWatch
from trainprobe.proto import (
    MESSAGE_SIZE_OPTIONS,
    PERMANENT_CODES,
    Backoff,
    fetch_ticket,
    probe_pb2,
    probe_pb2_grpc,
)

__all__ = ["StreamSession"]

log = logging.getLogger("trainprobe.hooks")


class StreamSession:
    """Runs one session (:meth:`_session`); the state is the reporter's."""

    target: str
    interval_s: float
    connected: bool
    sessions: int
    _make_hello: Callable[[], probe_pb2.Hello]
    _on_command: Callable[[probe_pb2.Command], probe_pb2.CommandResult | None]
    _on_connected_cb: Callable[[], None] | None
    _metadata: tuple[tuple[str, str], ...]
    _session_secret: bytes
    _buffer: collections.deque[probe_pb2.Report]
    _dropped: int
    _backoff: Backoff
    _watch: SocketWatch
    _closing: bool
    _renewing: bool
    _next_build: float
    _outbox: asyncio.Queue[probe_pb2.WorkerMessage | None] | None
    _warned: bool

    def _build(self) -> None:
        """Build one report into the buffer (the reporter's own)."""
        raise NotImplementedError

    async def _session(self) -> None:
        self._watch.check_safe()
        options = [
            *MESSAGE_SIZE_OPTIONS,
            ("grpc.enable_retries", 0),
            # Each try's new channel connects afresh. With the process-wide pool,
            # it would share the last one's subchannel and its reconnect backoff
            # (1 s, then x1.6): "failed to connect" for seconds after a
            # restarted sidecar is already serving.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        # The kernel's word for our pid, so that the sidecar may act on this
        # process (b"" from an older sidecar or over TCP: an unverified session).
        # Blocking, in this thread only: a local round trip (TICKET_TIMEOUT_S at worst).
        ticket = fetch_ticket(self.target)
        async with grpc.aio.insecure_channel(self.target, options=options) as channel:
            stub = probe_pb2_grpc.SidecarStub(channel)
            call = stub.Connect(metadata=self._metadata)
            write_timeout = max(5.0, 5 * self.interval_s)
            self._outbox = asyncio.Queue()
            reader = asyncio.ensure_future(self._read_commands(call))
            try:
                self._renewing = False  # this Hello has the newest identity
                hello = self._make_hello()
                hello.identity_ticket = ticket
                hello.session_secret = self._session_secret
                await asyncio.wait_for(
                    call.write(probe_pb2.WorkerMessage(hello=hello)), write_timeout
                )
                await self._write_loop(call, reader, write_timeout)
            except asyncio.InvalidStateError:
                # The sidecar ended the call (it refused us, say): raise its status instead.
                raise await _ended_error(call, stub, self._metadata, hello.job_id) from None
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.INTERNAL:
                    raise
                raise await _ended_error(call, stub, self._metadata, hello.job_id) from None
            finally:
                if not reader.done():
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                        await reader
                elif not reader.cancelled():
                    # Retrieved so that asyncio does not log it again at exit: the
                    # write path has already raised (and reported) the stream's error.
                    reader.exception()

    async def _write_loop(
        self, call: grpc.aio.StreamStreamCall, reader: asyncio.Future[None], write_timeout: float
    ) -> None:
        assert self._outbox is not None
        loop = asyncio.get_running_loop()
        self._build()  # a fresh report right after Hello registers the worker at once
        self._next_build = loop.time() + self.interval_s
        first = True
        while True:
            while self._buffer:
                report = self._buffer[0]
                report.dropped_reports = self._dropped
                await asyncio.wait_for(
                    call.write(probe_pb2.WorkerMessage(report=report)), write_timeout
                )
                self._buffer.popleft()
                if first:
                    first = False
                    self._on_connected()
            if reader.done():
                reader.result()  # raises the stream's error
                return
            if self._closing or self._renewing:
                await self._say_goodbye(call, reader, write_timeout)
                return
            wait_s = self._next_build - loop.time()
            if wait_s <= 0:
                self._build()
                self._next_build = max(self._next_build + self.interval_s, loop.time())
                continue
            try:
                message = await asyncio.wait_for(self._outbox.get(), wait_s)
            except asyncio.TimeoutError:
                continue
            if message is not None:  # None only wakes the loop up
                await asyncio.wait_for(call.write(message), write_timeout)

    def _on_connected(self) -> None:
        self.connected = True
        self.sessions += 1
        self._backoff.reset()
        self._dropped = 0
        if self._warned:
            log.warning("trainprobe: connected to sidecar at %s", self.target)
            self._warned = False
        else:
            log.debug("trainprobe: connected to sidecar at %s", self.target)
        if self._on_connected_cb is not None:
            try:
                self._on_connected_cb()
            except Exception:
                log.debug("trainprobe: on_connected callback failed", exc_info=True)

    async def _say_goodbye(
        self, call: grpc.aio.StreamStreamCall, reader: asyncio.Future[None], timeout_s: float
    ) -> None:
        self._build()
        while self._buffer:
            await asyncio.wait_for(
                call.write(probe_pb2.WorkerMessage(report=self._buffer.popleft())), timeout_s
            )
        bye = probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye(reason="close"))
        await asyncio.wait_for(call.write(bye), timeout_s)
        await call.done_writing()
        with contextlib.suppress(asyncio.TimeoutError, grpc.aio.AioRpcError):
            await asyncio.wait_for(asyncio.shield(reader), 1.0)

    async def _read_commands(self, call: grpc.aio.StreamStreamCall) -> None:
        assert self._outbox is not None
        try:
            async for command in call:
                try:
                    # Stack capture may take a while for many threads: off the loop.
                    result = await asyncio.to_thread(self._on_command, command)
                except Exception as err:  # a failing handler must not kill the stream
                    result = probe_pb2.CommandResult(
                        command_id=command.id, ok=False, error=str(err)
                    )
                if result is not None:
                    self._outbox.put_nowait(probe_pb2.WorkerMessage(command_result=result))
        finally:
            self._outbox.put_nowait(None)


async def _ended_error(
    call: grpc.aio.StreamStreamCall,
    stub: probe_pb2_grpc.SidecarStub,
    metadata: tuple[tuple[str, str], ...],
    job_id: str,
) -> grpc.aio.AioRpcError:
    """The reason the sidecar ended the stream, as well as it can be known.

    When a write races with the sidecar ending the call (refusing the token,
    say), grpc keeps "INTERNAL: Internal error from Core" as the call's status
    and drops the one the sidecar sent. A unary call on the same channel with
    the same credentials then tells the user the real reason
    (UNAUTHENTICATED); it is made only on this failure path.
    """
    code = await call.code()
    details = await call.details()
    if code == grpc.StatusCode.INTERNAL:
        try:
            await stub.GetStatus(
                probe_pb2.StatusRequest(job_id=job_id), metadata=metadata, timeout=2.0
            )
        except grpc.aio.AioRpcError as err:
            if err.code() in PERMANENT_CODES:
                code, details = err.code(), err.details()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)
