"""Summary mode's node end: one JobSync stream to the upstream, reconnected with backoff.

:class:`StreamTransport` is JobSync's transport with ``job_sync_to``. Each
round it sends what changed (:class:`~trainprobe.sidecar.core.job.uplink.Uplink`),
or nothing; the upstream's answers and pushes are applied to the engine's
job view as they arrive. A new stream starts from scratch: every job goes
up whole. It authenticates the upstream as a relay node does
(:mod:`trainprobe.sidecar.relay.link`): over TCP a pinned certificate before
the token goes out, over a Unix socket its directory's owner and mode. It
takes no orders from the upstream: only summaries come down, and this
node's own rules and evidence decide what it does to its own ranks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from trainprobe.proto import (
    JOB_SYNC_ACCEPTED_KEY,
    PERMANENT_CODES,
    Backoff,
    Endpoint,
    UnsafeSocketDir,
    bearer_metadata,
    probe_pb2,
)
from trainprobe.sidecar.config.tls import read_pem
from trainprobe.sidecar.core.job.uplink import Uplink
from trainprobe.sidecar.core.job.view import JobView, SyncReply
from trainprobe.sidecar.core.text import printable
from trainprobe.sidecar.sync.node import Payload
from trainprobe.sidecar.sync.wire import reply_of, upload_pb
from trainprobe.sidecar.transport.servicer import SERVICE
from trainprobe.sidecar.transport.upstream_call import accepted, open_channel, reason

__all__ = ["LOST_AFTER_S", "MAX_ERROR_CHARS", "OUTBOX", "WRITE_TIMEOUT_S", "StreamTransport"]

log = logging.getLogger("trainprobe.sidecar")

#: Longest wait for the upstream to take one message before the node reconnects.
WRITE_TIMEOUT_S = 10.0
#: Messages waiting to go up; while it is full a round is skipped. A write the
#: upstream does not take in WRITE_TIMEOUT_S starts a new stream.
OUTBOX = 16
#: Down this long and status calls the upstream lost: six retries at the
#: backoff's 5 s cap, so an upstream's restart is not reported, and as long as
#: the upstream keeps a silent node's ranks. Status only, never liveness: the
#: node still judges its own ranks, and restarting it would not bring the
#: upstream back.
LOST_AFTER_S = 30.0
#: The last error as status shows it (it may carry the upstream's words).
MAX_ERROR_CHARS = 300


class StreamTransport:
    """JobSync over one long-lived stream to ``upstream`` (see the module docstring)."""

    def __init__(
        self,
        upstream: Endpoint,
        token: str | None,
        pinned_cert_file: Path | None,
        node_id: str,
        refresh_s: float,
        view: JobView | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.upstream = upstream
        self.node_id = node_id
        self.refresh_s = refresh_s
        self.view = view
        self._clock = clock
        self.uplink = Uplink(refresh_s)
        #: Whether a stream is up now; how many were opened; messages sent and received.
        self.connected = False
        self.sessions = 0
        self.sent = self.received = 0
        #: Rounds skipped while the outbox was full (the upstream is slow to read).
        self.skipped = 0
        #: When the stream last came up or went down (start: down), why it last
        #: ended, and when the upstream's last message came.
        self.since = clock()
        self.last_error = ""
        self.answered_at: float | None = None
        self._out: asyncio.Queue[probe_pb2.JobSyncUp] | None = None
        self._task: asyncio.Task[None] | None = None
        self._metadata = bearer_metadata(token if upstream.kind != "unix" else None)
        self._tls: grpc.ChannelCredentials | None = None
        if upstream.kind != "unix" and pinned_cert_file is not None:
            pinned = read_pem(pinned_cert_file, "relay_tls_cert_file")
            self._tls = grpc.ssl_channel_credentials(root_certificates=pinned)

    @property
    def ready(self) -> bool:
        return True  # a round while the stream is down is dropped: a new one sends all

    def served(self, jobs: Sequence[str]) -> None:
        """Nothing to do: the uplink sends a job's end once it is not in a round."""

    async def exchange(self, payload: Payload) -> list[tuple[str, SyncReply]]:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        out = self._out
        if out is None or not self.connected:
            return []
        if out.full():
            # A busy upstream (a job's start, an incident at scale): skip this round,
            # as the uplink never saw it; the next one sends what changed since.
            self.skipped += 1
            return []
        view = self.view
        bounded = view.bounded if view is not None else False
        pushed = [j for j, r in payload.items() if view and view.judged_upstream(j, len(r[0]))]
        ups = self.uplink.uploads(payload, self._clock(), bounded, pushed)
        if ups:
            msg = probe_pb2.JobSyncUp(
                node_id=self.node_id, refresh_s=self.refresh_s, jobs=[upload_pb(u) for u in ups]
            )
            out.put_nowait(msg)  # not full: checked above, and nothing ran since
        return []  # answers are applied as they arrive

    def warn(self, job_id: str, reason: str) -> None:
        log.warning("job sync with %s: %s", self.upstream, reason)

    async def _run(self) -> None:
        backoff = Backoff()
        down_logged = False  # an outage is logged once
        while True:
            error: BaseException | None = None
            opened = self.sessions
            try:
                await self._once()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                error = err
            if self.connected:
                self.since = self._clock()
            self.connected = False
            self.last_error = printable(reason(error))[:MAX_ERROR_CHARS]
            if self.sessions != opened:  # it was up: a new outage
                backoff.reset()
                down_logged = False
            unsafe = isinstance(error, UnsafeSocketDir)
            permanent = unsafe or (
                isinstance(error, grpc.aio.AioRpcError) and error.code() in PERMANENT_CODES
            )
            if not down_logged:
                log.warning("job sync to %s is down (%s); retrying", self.upstream, reason(error))
                down_logged = True
            await asyncio.sleep(backoff.next_delay(permanent))

    async def _once(self) -> None:
        channel_cm = open_channel(self.upstream, "not syncing with", self._tls)
        async with channel_cm as channel:
            call = channel.stream_stream(
                f"/{SERVICE}/JobSync",
                request_serializer=probe_pb2.JobSyncUp.SerializeToString,
                response_deserializer=probe_pb2.JobSyncDown.FromString,
            )(metadata=self._metadata)
            await asyncio.wait_for(call.wait_for_connection(), WRITE_TIMEOUT_S)
            await accepted(call, JOB_SYNC_ACCEPTED_KEY, WRITE_TIMEOUT_S)
            self.uplink.reset()
            if self.view is not None:
                self.view.new_source()
            out = self._out = asyncio.Queue(OUTBOX)
            self.connected = True
            self.since = self._clock()
            self.sessions += 1
            log.info("syncing job summaries with %s", self.upstream)
            reader = asyncio.ensure_future(self._read(call))
            try:
                while True:
                    getter = asyncio.ensure_future(out.get())
                    done, _ = await asyncio.wait(
                        {reader, getter}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter in done:
                        await asyncio.wait_for(call.write(getter.result()), WRITE_TIMEOUT_S)
                        self.sent += 1
                    else:
                        getter.cancel()
                    if reader in done:
                        reader.result()  # raises what ended the stream
                        raise ConnectionError("the upstream ended the job sync stream")
            finally:
                self._out = None
                reader.cancel()
                call.cancel()

    async def _read(self, call: Any) -> None:
        async for down in call:
            self.received += 1
            now = self.answered_at = self._clock()
            for j in down.jobs:
                self.uplink.answered(j.job_id)
                if self.view is not None:
                    self.view.update(j.job_id, reply_of(j), now)

    def status(self) -> probe_pb2.JobSyncLinkStatus:
        """The stream as ``trainprobe status`` shows it."""
        now = self._clock()
        detailed, digest = self.view.held() if self.view is not None else (0, 0)
        age = now - self.since
        return probe_pb2.JobSyncLinkStatus(
            upstream=printable(str(self.upstream))[:MAX_ERROR_CHARS],
            connected=self.connected,
            state_age_s=round(age, 3),
            last_error=self.last_error,
            last_answer_age_s=-1.0
            if self.answered_at is None
            else round(now - self.answered_at, 3),
            jobs_detailed=detailed,
            jobs_digest=digest,
            sent=self.sent,
            received=self.received,
            sessions=self.sessions,
            skipped=self.skipped,
            lost=not self.connected and age > LOST_AFTER_S,
            lost_after_s=LOST_AFTER_S,
        )

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
