"""A relay node's link to its upstream: one ``Relay`` stream, reconnected with
backoff, that sends a batch every interval and hands what comes back to the
node.

The link knows the wire, not the workers: the node gives it how to make a
batch, what to do on a new stream (re-send every live worker's Hello) and on
each command. It authenticates the upstream before the token goes out: over
TCP with a pinned certificate (the upstream's own, the only root trusted), and
over a Unix socket by its directory's owner and mode, checked before every try.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from trainprobe.proto import (
    PERMANENT_CODES,
    RELAY_ACCEPTED_KEY,
    Backoff,
    Endpoint,
    UnsafeSocketDir,
    bearer_metadata,
    probe_pb2,
)
from trainprobe.sidecar.config.tls import read_pem
from trainprobe.sidecar.transport.servicer import SERVICE
from trainprobe.sidecar.transport.upstream_call import accepted, open_channel, reason

__all__ = ["WRITE_TIMEOUT_S", "UpstreamLink"]

log = logging.getLogger("trainprobe.sidecar")

#: Longest wait for the upstream to take one batch before the node reconnects.
WRITE_TIMEOUT_S = 10.0


class UpstreamLink:
    """The node's Relay stream to ``upstream``, up until ``done`` is set."""

    def __init__(
        self,
        upstream: Endpoint,
        token: str | None,
        pinned_cert_file: Path | None,
        interval_s: float,
        *,
        batch: Callable[[], probe_pb2.RelayBatch | None],
        before_batch: Callable[[], Awaitable[None]],
        on_stream: Callable[[], None],
        on_command: Callable[[probe_pb2.RelayCommand], None],
    ) -> None:
        self.upstream = upstream
        self.interval_s = interval_s
        self._batch, self._before_batch = batch, before_batch
        self._on_stream, self._on_command = on_stream, on_command
        #: Whether a Relay stream is up now, and how many were opened.
        self.connected = False
        self.sessions = 0
        #: Ends the loop; the node sets it once its last batch may go up.
        self.done = asyncio.Event()
        # Unix sockets are guarded by file permissions; a token goes over TCP only.
        self._metadata = bearer_metadata(token if upstream.kind != "unix" else None)
        #: The upstream's own certificate, the only root this node trusts: the
        #: handshake fails against anyone without its key, before the token is sent.
        self._tls: grpc.ChannelCredentials | None = None
        if upstream.kind != "unix" and pinned_cert_file is not None:
            pinned = read_pem(pinned_cert_file, "relay_tls_cert_file")
            self._tls = grpc.ssl_channel_credentials(root_certificates=pinned)

    async def run(self) -> None:
        """Relay until :attr:`done`; a broken stream is retried with backoff."""
        backoff = Backoff()
        # An outage is logged once; an unsafe directory met during it gets its own line.
        down_logged = unsafe_logged = False
        while not self.done.is_set():
            error: Exception | None = None
            try:
                await self._once()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                error = err
            if self.connected:  # a new outage: log it once, retry soon
                self.connected, down_logged, unsafe_logged = False, False, False
                backoff.reset()
            unsafe = isinstance(error, UnsafeSocketDir)
            permanent = unsafe or (
                isinstance(error, grpc.aio.AioRpcError) and error.code() in PERMANENT_CODES
            )
            if error is not None and not (unsafe_logged if unsafe else down_logged):
                log.warning("relay to %s is down (%s); retrying", self.upstream, reason(error))
                down_logged, unsafe_logged = True, unsafe_logged or unsafe
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.done.wait(), backoff.next_delay(permanent))

    async def _once(self) -> None:
        channel_cm = open_channel(self.upstream, "not relaying to", self._tls)
        async with channel_cm as channel:
            call = channel.stream_stream(
                f"/{SERVICE}/Relay",
                request_serializer=probe_pb2.RelayBatch.SerializeToString,
                response_deserializer=probe_pb2.RelayCommand.FromString,
            )(metadata=self._metadata)
            await call.wait_for_connection()
            await accepted(call, RELAY_ACCEPTED_KEY, WRITE_TIMEOUT_S)
            self.connected = True
            self.sessions += 1
            log.info("relaying to %s", self.upstream)
            self._on_stream()
            reader = asyncio.ensure_future(self._read(call))
            try:
                while not self.done.is_set():
                    await self._before_batch()
                    batch = self._batch()
                    if batch is not None:
                        # An upstream that stopped reading (a partition, not a
                        # reset) would block the write forever: reconnect instead.
                        await asyncio.wait_for(call.write(batch), WRITE_TIMEOUT_S)
                    done, _ = await asyncio.wait({reader}, timeout=self.interval_s)
                    if done:
                        reader.result()  # raises what ended the stream
                        raise ConnectionError("the upstream ended the relay stream")
                with contextlib.suppress(Exception):
                    await call.done_writing()
            finally:
                reader.cancel()
                call.cancel()

    async def _read(self, call: Any) -> None:
        async for cmd in call:
            self._on_command(cmd)
