"""Relay mode (``--relay-to``): a node sidecar that forwards instead of judging.

It accepts its workers' ``Connect`` streams as usual but runs no rules: every
message goes, as the bytes the worker sent, into a bounded buffer that is sent
upstream as one ``RelayBatch`` every ``relay_interval_ms`` over one ``Relay``
stream. The upstream sidecar judges; this node forwards its commands to the
right worker stream, carries out its kill orders with local signals
(:func:`~trainprobe.sidecar.act.signals.terminate`, pid-reuse checked), and reports
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
from typing import Any, cast

import grpc

from trainprobe.proto import VERSION, check_socket_dir, parse_endpoint, probe_pb2
from trainprobe.sidecar.act.procs import still_alive
from trainprobe.sidecar.act.signals import terminate
from trainprobe.sidecar.config.settings import Settings
from trainprobe.sidecar.relay.buffer import GOODBYE_TAG, Kind, RelayBuffer, kind_of
from trainprobe.sidecar.relay.held import NodeHeld
from trainprobe.sidecar.relay.link import UpstreamLink
from trainprobe.sidecar.relay.wire import Rejected, WorkerStream, hello_pid_and_ticket, item_pb
from trainprobe.sidecar.tasks import TaskSet
from trainprobe.sidecar.transport.doom_files import DoomFiles
from trainprobe.sidecar.transport.health import DoomedPids, Health
from trainprobe.sidecar.transport.listen.identity import TicketDesk
from trainprobe.sidecar.transport.listen.sockets import open_servers, server_tls
from trainprobe.sidecar.transport.servicer import SERVICE
from trainprobe.sidecar.transport.streams import pump

log = logging.getLogger("trainprobe.sidecar")

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
        self._streams: dict[int, WorkerStream] = {}
        #: stream id -> (pid, start ticks, uid) of the worker this node verified
        #: (pid 0: not verified): what it vouches for upstream and may signal.
        self._pids: OrderedDict[int, tuple[int, int | None, int]] = OrderedDict()
        self._ids = itertools.count(1)
        #: Which verified workers the kernel holds (read when silent), for the upstream.
        self.held = NodeHeld()
        self._stop = asyncio.Event()
        #: The Relay stream; its ``done`` is set after the worker servers
        #: stopped, so the last batch (their Goodbyes) still goes up.
        self.link = UpstreamLink(
            self.upstream,
            settings.token,
            settings.relay_tls_cert_file,
            self.interval_s,
            batch=self.batch,
            before_batch=self.held.poll,
            on_stream=self._new_stream,
            on_command=self._command,
        )
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

    def _new_stream(self) -> None:
        """A new Relay stream knows no session: every live worker's Hello goes first."""
        self._warned_drop = False
        self.buffer.resume((s.sid, s.hello) for s in self._streams.values())
        self.held.watch.resend()

    def _command(self, cmd: probe_pb2.RelayCommand) -> None:
        which = cmd.WhichOneof("kind")
        if which == "kill":
            self._spawn(self._kill(cmd.stream_id, cmd.kill))
            return
        stream = self._streams.get(cmd.stream_id)
        if stream is None:
            return  # that worker's stream has ended
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
            for c in out.skipped:  # the upstream's action record lists them
                left = result.skipped.add(pid=cast(int, c["pid"]), ppid=cast(int, c["ppid"]))
                left.name, left.reason = str(c["name"]), str(c["reason"])
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
        self._relay_task = asyncio.ensure_future(self.link.run())
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
            self.link.done.set()
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(self._relay_task, 2.0)

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()
