"""Relay mode (``--relay-to``): a node sidecar that forwards instead of judging.

It accepts its workers' ``Connect`` streams as usual but runs no rules: every
message goes, as the bytes the worker sent, into a bounded buffer that is sent
upstream as one ``RelayBatch`` every ``relay_interval_ms`` over one ``Relay``
stream. The upstream sidecar judges; this node forwards its commands to the
right worker stream, carries out its kill orders with local signals
(:func:`~trainprobe.sidecar.act.procs.terminate`, pid-reuse checked), and reports
streams that end without a Goodbye together with whether the pid still runs,
and which of its verified workers the kernel holds (:mod:`.held`).

The hooks never notice the upstream: while it is unreachable their streams
stay open here, reports are buffered (the oldest dropped beyond the bound),
and the node reconnects with backoff, re-sending every live worker's Hello
first on the new stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections import OrderedDict
from typing import Any

import grpc

from trainprobe.proto import (
    MESSAGE_SIZE_OPTIONS,
    PERMANENT_CODES,
    VERSION,
    Backoff,
    UnsafeSocketDir,
    bearer_metadata,
    check_socket_dir,
    parse_endpoint,
    probe_pb2,
)
from trainprobe.sidecar.act.procs import still_alive, terminate
from trainprobe.sidecar.config.settings import Settings
from trainprobe.sidecar.config.tls import read_pem
from trainprobe.sidecar.relay.buffer import GOODBYE_TAG, Kind, RelayBuffer, kind_of
from trainprobe.sidecar.relay.held import NodeHeld
from trainprobe.sidecar.relay.wire import (
    Rejected,
    WorkerStream,
    accepted,
    hello_pid_and_ticket,
    item_pb,
    reason,
)
from trainprobe.sidecar.tasks import TaskSet
from trainprobe.sidecar.transport.doom_files import DoomFiles
from trainprobe.sidecar.transport.health import DoomedPids, Health
from trainprobe.sidecar.transport.identity import TicketDesk
from trainprobe.sidecar.transport.servicer import SERVICE
from trainprobe.sidecar.transport.sockets import open_servers, server_tls
from trainprobe.sidecar.transport.streams import pump

log = logging.getLogger("trainprobe.sidecar")

#: Longest wait for the upstream to take one batch before the node reconnects.
WRITE_TIMEOUT_S = 10.0
#: A kill order for a worker whose pid this node did not verify.
NOT_SIGNALLABLE = (
    "pid not verified by the relaying node (no identity ticket: another host, an old "
    "hook, or an impostor); not signalled"
)
#: Streams whose pid is remembered for kill orders that come after they ended.
_REMEMBERED_STREAMS = 4096


class RelayNode:
    """A running relay-mode sidecar: worker servers plus the upstream link."""

    def __init__(self, settings: Settings) -> None:
        if not settings.relay_to:
            raise ValueError("relay mode needs relay_to")
        self.settings = settings
        self.upstream = parse_endpoint(settings.relay_to)
        self.buffer = RelayBuffer(settings.relay_buffer_messages)
        self.interval_s = settings.relay_interval_ms / 1000.0
        self.addresses: list[str] = []
        #: Whether a Relay stream to the upstream is up now, and how many were opened.
        self.connected = False
        self.sessions = 0
        self._streams: dict[int, WorkerStream] = {}
        #: stream id -> (pid, start ticks, uid) of the worker this node verified
        #: (pid 0: not verified): what it vouches for upstream and may signal.
        self._pids: OrderedDict[int, tuple[int, int | None, int]] = OrderedDict()
        self._ids = itertools.count(1)
        #: Which verified workers the kernel holds (read when silent), for the upstream.
        self.held = NodeHeld()
        # Unix sockets are guarded by file permissions; a token goes over TCP only.
        self._metadata = bearer_metadata(settings.token if self.upstream.kind != "unix" else None)
        #: The upstream's own certificate, the only root this node trusts: the
        #: handshake fails against anyone without its key, before the token is sent.
        self._tls: grpc.ChannelCredentials | None = None
        if self.upstream.kind != "unix" and settings.relay_tls_cert_file is not None:
            pinned = read_pem(settings.relay_tls_cert_file, "relay_tls_cert_file")
            self._tls = grpc.ssl_channel_credentials(root_certificates=pinned)
        self._stop = asyncio.Event()
        #: Ends the relay loop; set after the worker servers stopped, so the
        #: last batch (their Goodbyes) still goes up.
        self._done = asyncio.Event()
        self._servers: Any = None
        self._tasks = TaskSet()
        self._relay_task: asyncio.Task[None] | None = None
        self._warned_drop = False
        #: Set while this node shuts down: its workers' streams end because of
        #: us, not them, so they are not reported as vanished.
        self._closing = False
        #: Identity tickets: the only way a worker's pid becomes ours to signal.
        self.tickets = TicketDesk()
        self._hostname = socket.gethostname()
        #: Processes the upstream ordered killed: the health service's trainprobe.workers.
        self._doomed = DoomedPids()
        self.health = Health(
            lambda: self._relay_task is not None and not self._relay_task.done(),
            self._doomed.none_left,
        )

    # -- the worker side -------------------------------------------------------

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                # Bytes in: the node forwards what the worker sent without a parse.
                "Connect": grpc.stream_stream_rpc_method_handler(
                    self.Connect,
                    request_deserializer=None,
                    response_serializer=probe_pb2.Command.SerializeToString,
                ),
                "GetStatus": grpc.unary_unary_rpc_method_handler(
                    self.GetStatus,
                    request_deserializer=None,
                    response_serializer=probe_pb2.StatusReply.SerializeToString,
                ),
            },
        )

    async def GetStatus(self, request: Any, context: Any) -> probe_pb2.StatusReply:
        """No workers: in relay mode the upstream sidecar holds their state."""
        return probe_pb2.StatusReply(
            sidecar_version=VERSION, node=f"{socket.gethostname()} (relay)"
        )

    async def Connect(self, request_iterator: Any, context: Any) -> None:
        first = await anext(request_iterator, None)
        if first is None:
            return
        sid = next(self._ids)
        pid, ticket, interval_ms = hello_pid_and_ticket(first)
        # As in direct mode, only a pid the kernel vouched for is ours to signal.
        peer = self.tickets.redeem(ticket, pid) if ticket else None
        local = peer is not None
        stream = WorkerStream(sid, first)
        self._streams[sid] = stream
        self._pids[sid] = (pid, peer.start_ticks, peer.uid) if peer is not None else (0, None, -1)
        if peer is not None:
            self.held.add(sid, pid, peer.start_ticks, interval_ms)
        while len(self._pids) > _REMEMBERED_STREAMS:
            self._pids.popitem(last=False)
        self._add(sid, Kind.HELLO, first)
        last = [first]
        rejected: Rejected | None = None

        async def read() -> None:
            async for data in request_iterator:
                last[0] = data
                self.held.heard(sid)
                self._add(sid, kind_of(data), data)

        async def write(item: Any) -> None:
            if isinstance(item, probe_pb2.RelayReject):
                raise Rejected(item)
            await context.write(item)

        try:
            await pump(write, read(), stream.outbox)
        except Rejected as err:
            rejected = err
        finally:
            self._streams.pop(sid, None)
            self.held.forget(sid)
            if rejected is None and last[0][:1] != GOODBYE_TAG and not self._closing:
                # Not awaited here: gRPC may cancel this handler again while it waits.
                self._spawn(self._vanished(sid, pid, local))
        if rejected is not None:
            log.warning("upstream rejected worker pid %d: %s", pid, rejected.details)
            await context.abort(rejected.code, rejected.details)

    async def _vanished(self, sid: int, pid: int, local: bool) -> None:
        alive = await still_alive(pid) if local else False
        self._add(sid, Kind.ENDED, alive)
        log.warning("worker pid %d stream ended without goodbye (pid alive: %s)", pid, alive)

    def _add(self, sid: int, kind: Kind, payload: Any) -> None:
        if self.buffer.add(sid, kind, payload) and not self._warned_drop:
            self._warned_drop = True
            log.warning(
                "relay buffer full (%d messages): dropping the oldest reports until the "
                "upstream %s takes them",
                self.buffer.max_items,
                self.upstream,
            )

    def _spawn(self, coro: Any) -> None:
        self._tasks.spawn(coro)

    # -- the upstream side -----------------------------------------------------

    def batch(self) -> probe_pb2.RelayBatch | None:
        """Everything buffered as one RelayBatch; None when there is nothing."""
        items, dropped = self.buffer.take()
        held = self.held.pb()  # taken with the items: a release goes with its report
        if not items and not dropped and not held:
            return None
        return probe_pb2.RelayBatch(
            items=[self._item_pb(i) for i in items],
            dropped_reports=dropped,
            interval_ms=self.settings.relay_interval_ms,
            held=held,
        )

    def _item_pb(self, item: Any) -> probe_pb2.RelayItem:
        """``item_pb``, and on a Hello this node's word for the pid it verified."""
        out = item_pb(item)
        if item[1] is Kind.HELLO:
            pid, ticks, uid = self._pids.get(item[0], (0, None, -1))
            if pid > 0:
                out.vouch.pid, out.vouch.start_ticks, out.vouch.uid = pid, ticks or 0, uid
        return out

    async def _relay_forever(self) -> None:
        backoff = Backoff()
        # An outage is logged once; an unsafe directory met during it gets its own line.
        down_logged = unsafe_logged = False
        while not self._done.is_set():
            error: Exception | None = None
            try:
                await self._relay_once()
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
                await asyncio.wait_for(self._done.wait(), backoff.next_delay(permanent))

    async def _relay_once(self) -> None:
        # Again on every try: the directory may have been made, or opened up, since;
        # and no channel until it exists (gRPC would connect to what appears later).
        upstream = check_socket_dir(self.upstream, "not relaying to", present=True)
        target, options = upstream.grpc_target, MESSAGE_SIZE_OPTIONS
        channel_cm = (
            grpc.aio.insecure_channel(target, options=options)
            if self._tls is None
            else grpc.aio.secure_channel(target, self._tls, options=options)
        )
        async with channel_cm as channel:
            call = channel.stream_stream(
                f"/{SERVICE}/Relay",
                request_serializer=probe_pb2.RelayBatch.SerializeToString,
                response_deserializer=probe_pb2.RelayCommand.FromString,
            )(metadata=self._metadata)
            await call.wait_for_connection()
            await accepted(call, WRITE_TIMEOUT_S)
            self.connected, self._warned_drop = True, False
            self.sessions += 1
            log.info("relaying to %s", self.upstream)
            # The new stream knows no session: every live worker's Hello goes first.
            self.buffer.resume((s.sid, s.hello) for s in self._streams.values())
            self.held.watch.resend()
            reader = asyncio.ensure_future(self._commands(call))
            try:
                while not self._done.is_set():
                    await self.held.poll()
                    batch = self.batch()
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

    async def _commands(self, call: Any) -> None:
        async for cmd in call:
            which = cmd.WhichOneof("kind")
            if which == "kill":
                self._spawn(self._kill(cmd.stream_id, cmd.kill))
                continue
            stream = self._streams.get(cmd.stream_id)
            if stream is None:
                continue  # that worker's stream has ended
            if which == "command":
                stream.outbox.put_nowait(cmd.command)
            elif which == "reject":
                stream.outbox.put_nowait(cmd.reject)

    async def _kill(self, sid: int, order: probe_pb2.RelayKill) -> None:
        pid, ticks, _ = self._pids.get(sid, (0, None, -1))
        result = probe_pb2.RelayKillResult(kill_id=order.kill_id)
        if pid <= 0:
            result.error = NOT_SIGNALLABLE
            log.warning("kill order for worker stream %d refused: %s", sid, result.error)
        else:
            self._doomed.add(pid, ticks)  # the upstream's decision, for the kubelet now
            out = await terminate(pid, order.grace_s, ticks)
            result.exited, result.error = out.exited, out.error
            result.signals.extend(out.signals)
            result.seconds = out.seconds
            log.warning("killed worker pid %d for the upstream: %s", pid, out.error or "exited")
        self._add(sid, Kind.KILL_RESULT, result)

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        # Whoever could write the upstream's directory could pose as the upstream.
        check_socket_dir(self.upstream, "not relaying to")
        self._servers = await open_servers(
            self.settings.listen_addresses,
            self.settings.token,
            self.settings.insecure,
            (self.handler(), self.health.handler()),
            self.tickets,
            self.settings.socket_access,
            server_tls(self.settings.tls_cert_file, self.settings.tls_key_file),
        )
        self.addresses = self._servers.addresses
        if self._servers.unix_paths:  # the trainer's exec probe reads the decisions there
            self._doomed.files = DoomFiles(self._servers.unix_paths[0].parent)
        self._relay_task = asyncio.ensure_future(self._relay_forever())
        log.info(
            "trainprobe relay node listening on %s; relaying to %s every %d ms (no rules here)",
            ", ".join(self.addresses),
            self.upstream,
            self.settings.relay_interval_ms,
        )

    async def stop(self, grace_s: float = 1.0) -> None:
        self._stop.set()
        self._closing = True
        self.held.close()
        await self.tickets.close()
        if self._servers is not None:
            await asyncio.gather(*(s.stop(grace_s) for s in self._servers.servers))
            for path in self._servers.unix_paths:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        if self._relay_task is not None:
            await asyncio.sleep(self.interval_s + 0.05)  # one last batch: the Goodbyes
            self._done.set()
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(self._relay_task, 2.0)

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()
