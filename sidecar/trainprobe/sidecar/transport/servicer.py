"""The gRPC adapter: streams in, registry updates, commands out.

Runs on the sidecar's one asyncio loop, like the rules, so the registry needs
no lock. Bad input ends only the offending stream, with a clear status and
one log line. How a stream's first message becomes a session (or a refusal)
is ``session_open.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.act.procs import still_alive
from trainprobe.sidecar.core.session.model import (
    ReportData,
    VerifiedProcess,
    WorkerState,
    heard_every_ms,
    trim_applied,
)
from trainprobe.sidecar.core.session.overload import Shedder
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.core.session.validate import ValidationError
from trainprobe.sidecar.tasks import TaskSet
from trainprobe.sidecar.transport import pb
from trainprobe.sidecar.transport.commander import Commander, StreamSink
from trainprobe.sidecar.transport.listen.identity import TicketDesk
from trainprobe.sidecar.transport.reclaim import COLLECT_AFTER_CLOSE_S, Reclaimer
from trainprobe.sidecar.transport.session_open import Refusal, open_session
from trainprobe.sidecar.transport.streams import Malformed, safe_parser

__all__ = ["SERVICE", "Ending", "Refusal", "ReportListener", "SidecarServicer"]

log = logging.getLogger("trainprobe.sidecar")

SERVICE = "trainprobe.v1.Sidecar"
ReportListener = Callable[[WorkerState, ReportData], None]
#: How a stream ended ("goodbye", "vanished", "rejected") and its refusal, if any.
Ending = tuple[str, Refusal | None]


class SidecarServicer:
    """Implements trainprobe.v1.Sidecar on top of a :class:`Registry`."""

    def __init__(
        self,
        registry: Registry,
        commander: Commander,
        status: Callable[[str], probe_pb2.StatusReply],
        diagnose: Callable[[str], Awaitable[probe_pb2.DiagnoseReply]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        tickets: TicketDesk | None = None,
        diagnose_ray: Callable[[bool], Awaitable[probe_pb2.DiagnoseReply]] | None = None,
    ) -> None:
        self.registry = registry
        #: Redeems the identity tickets of Hellos (None: every session unverified).
        self.tickets = tickets
        self.commander = commander
        self._status = status
        self._diagnose = diagnose
        #: ``diagnose --ray``: RuntimeError = no Ray watcher here, LookupError = no snapshot yet.
        self._diagnose_ray = diagnose_ray
        self._clock = clock
        self.report_listeners: list[ReportListener] = []
        #: Which reports are too late to apply in full (core/session/overload.py), and counts.
        self.shedder = Shedder()
        self._closing = TaskSet()
        self.reclaimer = Reclaimer()

    def handler(self, extra: dict[str, Any] | None = None) -> grpc.GenericRpcHandler:
        """Method handlers whose parsers turn garbage into :class:`Malformed`.

        ``extra`` adds methods served elsewhere (``Relay``) to the same service.
        """
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                **(extra or {}),
                "Connect": grpc.stream_stream_rpc_method_handler(
                    self.Connect,
                    request_deserializer=safe_parser(probe_pb2.WorkerMessage),
                    response_serializer=probe_pb2.Command.SerializeToString,
                ),
                "GetStatus": grpc.unary_unary_rpc_method_handler(
                    self.GetStatus,
                    request_deserializer=safe_parser(probe_pb2.StatusRequest),
                    response_serializer=probe_pb2.StatusReply.SerializeToString,
                ),
                "Diagnose": grpc.unary_unary_rpc_method_handler(
                    self.Diagnose,
                    request_deserializer=safe_parser(probe_pb2.DiagnoseRequest),
                    response_serializer=probe_pb2.DiagnoseReply.SerializeToString,
                ),
            },
        )

    async def _reject(self, context: Any, code: grpc.StatusCode, details: str) -> None:
        log.warning("rejected %s from %s: %s", code.name, context.peer(), details)
        await context.abort(code, details)

    async def GetStatus(self, request: Any, context: Any) -> probe_pb2.StatusReply:
        if isinstance(request, Malformed):
            await self._reject(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"malformed StatusRequest: {request.error}",
            )
        try:
            return self._status(request.job_id)
        except LookupError as err:  # a --job name that several jobs have
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            raise

    async def Diagnose(self, request: Any, context: Any) -> probe_pb2.DiagnoseReply:
        if isinstance(request, Malformed):
            await self._reject(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"malformed DiagnoseRequest: {request.error}",
            )
        if request.ray:
            return await self._ray_graph(request.dot, context)
        if self._diagnose is None:
            await self._reject(context, grpc.StatusCode.UNIMPLEMENTED, "diagnosis is not enabled")
        try:
            return await self._diagnose(request.job_id)  # type: ignore[misc]
        except LookupError as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err.args[0] if err.args else err))
            raise

    async def _ray_graph(self, dot: bool, context: Any) -> probe_pb2.DiagnoseReply:
        try:
            if self._diagnose_ray is None:
                raise RuntimeError("this sidecar runs no Ray watcher")
            return await self._diagnose_ray(dot)
        except RuntimeError as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        except LookupError as err:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        raise AssertionError("context.abort returns only by raising")

    async def Connect(self, request_iterator: Any, context: Any) -> None:
        state: WorkerState | None = None
        generation = -1
        error: Refusal | None = None
        sink = StreamSink(context.write)
        how = "vanished"
        try:
            first = await anext(request_iterator, None)
            if first is None:
                return
            unix = str(context.peer()).startswith("unix:")
            state, error = self.open_session(first, relay=None, unix=unix)
            del first  # its upb arena (C memory) is not kept for the stream's life
            if state is None:
                return
            generation = state.generation
            self.commander.attach(state.key, generation, sink)
            # The handler itself reads: one coroutine per stream, nothing else
            # waiting (commands go out through the sink when there are any).
            how, error = await self._read(state, request_iterator)
        finally:
            sink.close()
            if state is not None:
                self.commander.detach(state.key, generation)
                # Not awaited here: gRPC may cancel this handler again while it waits.
                self._closing.spawn(self._close(state, generation, how))
            if error is not None:
                # Not context.abort(): its AbortError joins the call's reference
                # cycles with this frame. A status set and a plain return end the
                # stream the same way for the client.
                log.warning("rejected %s from %s: %s", error[0].name, context.peer(), error[1])
                context.set_code(error[0])
                context.set_details(error[1])
                self.reclaimer.soon()

    async def _close(self, state: WorkerState, generation: int, how: str) -> None:
        alive = await still_alive(state.hello.pid) if state.local and how != "goodbye" else None
        self.end_session(state, generation, how, alive)

    def end_session(
        self, state: WorkerState, generation: int, how: str, alive: bool | None
    ) -> None:
        """Close a session in the registry, with one log line (Connect and Relay)."""
        # A stream's gRPC buffers are freed now, from cycles and threads' arenas:
        # collect and hand whole free pages back (once per COLLECT_AFTER_CLOSE_S),
        # or RSS stays at the high-water mark of sessions that have ended.
        self.reclaimer.soon(COLLECT_AFTER_CLOSE_S)
        if self.registry.close(state, generation, how, self._clock(), alive):
            level = logging.INFO if how == "goodbye" else logging.WARNING
            via = "" if state.relay is None else f" via relay {state.relay}"
            log.log(
                level, "worker %s (pid %d%s) stream ended: %s", state.key, state.hello.pid, via, how
            )

    def open_session(
        self,
        first: Any,
        relay: Any,
        vouched: VerifiedProcess | None = None,
        node: object | None = None,
        unix: bool = False,
    ) -> tuple[WorkerState | None, Refusal | None]:
        """Open a session from a stream's first message (Connect, or relayed when
        ``relay`` names the relay route); on refusal, the status to send
        (:func:`~trainprobe.sidecar.transport.session_open.open_session`)."""
        return open_session(
            self.registry, self.tickets, self._clock, first, relay, vouched, node, unix
        )

    async def _read(self, state: WorkerState, request_iterator: Any) -> Ending:
        """Consume the stream; return how it ended and the error to send, if any."""
        async for msg in request_iterator:
            ending = self.handle(state, msg)
            if ending is not None:
                return ending
            # Not held while this waits for the next one: a parsed message's upb
            # arena (C memory, about 30 KiB for a full report) for every session.
            del msg
        return "vanished", None

    def handle(self, state: WorkerState, msg: Any) -> Ending | None:
        """Apply one WorkerMessage after the Hello; an :data:`Ending` ends the stream.

        The one per-message path of Connect streams and relayed streams alike.
        """
        if isinstance(msg, Malformed):
            return "rejected", (
                grpc.StatusCode.INVALID_ARGUMENT,
                f"malformed WorkerMessage ({msg.size} bytes): {msg.error}",
            )
        if not state.connected:
            # Evicted: a verified process took this (job, rank) over (see Registry.open).
            return "rejected", (
                grpc.StatusCode.ALREADY_EXISTS,
                f"rank {state.hello.rank} of job {state.hello.job_id!r} was taken over by "
                "a verified process",
            )
        kind = msg.WhichOneof("body")
        if kind == "report":
            report = pb.report_from_pb(msg.report)
            now = self._clock()
            # Late (newer ones are queued behind it): applied for liveness only.
            late = state.reports > 0 and self.shedder.is_late(
                now - (report.mono_ns / 1e9 + state.offset_s), heard_every_ms(state) / 1000.0
            )
            try:
                self.registry.apply(state, report, now, sampled=not late)
            except ValidationError as err:
                return "rejected", (grpc.StatusCode.INVALID_ARGUMENT, f"bad report: {err}")
            self.shedder.note(now, state.ingest_lag_s, late)
            if (pace := self.shedder.pace) is not None:
                # A relaying node's wait for its next batch is not our lateness.
                pace.note_report(now, state.ingest_lag_s - state.relay_interval_ms / 1000.0)
            if not late:
                for listener in self.report_listeners:
                    try:
                        listener(state, report)
                    except Exception:
                        log.exception("report listener %r failed", listener)
            trim_applied(report)
        elif kind == "command_result":
            self.commander.resolve(msg.command_result, state.key)
        elif kind == "goodbye":
            return "goodbye", None
        elif kind == "hello":
            return "rejected", (
                grpc.StatusCode.FAILED_PRECONDITION,
                "a second Hello on one stream; open a new stream instead",
            )
        return None
