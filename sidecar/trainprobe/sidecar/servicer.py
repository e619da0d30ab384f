"""The gRPC adapter: streams in, registry updates, commands out.

Runs on the sidecar's one asyncio loop, like the rules, so the registry needs
no lock. Bad input ends only the offending stream, with a clear status and
one log line.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from trainprobe.proto import probe_pb2
from trainprobe.sidecar import convert
from trainprobe.sidecar.core.model import ReportData, WorkerKey, WorkerState
from trainprobe.sidecar.core.registry import Registry, RegistryError
from trainprobe.sidecar.core.validate import ValidationError
from trainprobe.sidecar.procs import pid_alive, proc_start_ticks

log = logging.getLogger("trainprobe.sidecar")

SERVICE = "trainprobe.v1.Sidecar"
ReportListener = Callable[[WorkerState, ReportData], None]


@dataclass(frozen=True)
class Malformed:
    """Stands in for a message that did not parse."""

    type_name: str
    size: int
    error: str


def _safe_parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as err:
            return Malformed(cls.__name__, len(data), str(err) or type(err).__name__)

    return parse


class Commander:
    """Outbound command queues per live session and their pending results."""

    def __init__(self) -> None:
        self._queues: dict[WorkerKey, tuple[int, asyncio.Queue[probe_pb2.Command]]] = {}
        self._pending: dict[int, asyncio.Future[probe_pb2.CommandResult]] = {}
        self._ids = itertools.count(1)

    def attach(self, key: WorkerKey, generation: int) -> asyncio.Queue[probe_pb2.Command]:
        queue: asyncio.Queue[probe_pb2.Command] = asyncio.Queue()
        self._queues[key] = (generation, queue)
        return queue

    def detach(self, key: WorkerKey, generation: int) -> None:
        entry = self._queues.get(key)
        if entry is not None and entry[0] == generation:
            del self._queues[key]

    def connected(self, key: WorkerKey) -> bool:
        return key in self._queues

    async def request(
        self, key: WorkerKey, timeout_s: float, **kind: Any
    ) -> probe_pb2.CommandResult | None:
        """Send a command (``dump_stacks=...`` or ``abort=...``) and await its result.

        Returns None if the worker is not connected or does not answer in time
        (a thread holding the GIL in C code cannot answer).
        """
        entry = self._queues.get(key)
        if entry is None:
            return None
        cid = next(self._ids)
        fut: asyncio.Future[probe_pb2.CommandResult] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        entry[1].put_nowait(probe_pb2.Command(id=cid, **kind))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            self._pending.pop(cid, None)

    def resolve(self, result: probe_pb2.CommandResult) -> None:
        fut = self._pending.get(result.command_id)
        if fut is not None and not fut.done():
            fut.set_result(result)


class SidecarServicer:
    """Implements trainprobe.v1.Sidecar on top of a :class:`Registry`."""

    def __init__(
        self,
        registry: Registry,
        commander: Commander,
        status: Callable[[str], probe_pb2.StatusReply],
        diagnose: Callable[[str], Awaitable[probe_pb2.DiagnoseReply]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.commander = commander
        self._status = status
        self._diagnose = diagnose
        self._clock = clock
        self.report_listeners: list[ReportListener] = []
        self._hostname = socket.gethostname()
        self._closing: set[asyncio.Future[None]] = set()

    def handler(self) -> grpc.GenericRpcHandler:
        """Method handlers whose parsers turn garbage into :class:`Malformed`."""
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Connect": grpc.stream_stream_rpc_method_handler(
                    self.Connect,
                    request_deserializer=_safe_parser(probe_pb2.WorkerMessage),
                    response_serializer=probe_pb2.Command.SerializeToString,
                ),
                "GetStatus": grpc.unary_unary_rpc_method_handler(
                    self.GetStatus,
                    request_deserializer=_safe_parser(probe_pb2.StatusRequest),
                    response_serializer=probe_pb2.StatusReply.SerializeToString,
                ),
                "Diagnose": grpc.unary_unary_rpc_method_handler(
                    self.Diagnose,
                    request_deserializer=_safe_parser(probe_pb2.DiagnoseRequest),
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
        return self._status(request.job_id)

    async def Diagnose(self, request: Any, context: Any) -> probe_pb2.DiagnoseReply:
        if isinstance(request, Malformed):
            await self._reject(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"malformed DiagnoseRequest: {request.error}",
            )
        if self._diagnose is None:
            await self._reject(context, grpc.StatusCode.UNIMPLEMENTED, "diagnosis is not enabled")
        try:
            return await self._diagnose(request.job_id)  # type: ignore[misc]
        except LookupError as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err.args[0] if err.args else err))
            raise

    async def Connect(self, request_iterator: Any, context: Any) -> None:
        state: WorkerState | None = None
        generation = -1
        error: tuple[grpc.StatusCode, str] | None = None
        outbox: asyncio.Queue[probe_pb2.Command] | None = None
        how = "vanished"
        try:
            first = await anext(request_iterator, None)
            if first is None:
                return
            state, error = self._open(first, context)
            if state is None:
                return
            generation = state.generation
            outbox = self.commander.attach(state.key, generation)
            reader = asyncio.ensure_future(self._read(state, request_iterator))
            while True:
                getter = asyncio.ensure_future(outbox.get())
                done, _ = await asyncio.wait({reader, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    await context.write(getter.result())
                else:
                    getter.cancel()
                if reader in done:
                    how, error = reader.result()
                    return
        finally:
            if state is not None:
                self.commander.detach(state.key, generation)
                # Not awaited here: gRPC may cancel this handler again while it waits.
                closing = asyncio.ensure_future(self._close(state, generation, how))
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            if error is not None:
                await self._reject(context, *error)

    async def _close(self, state: WorkerState, generation: int, how: str) -> None:
        alive = await self._still_alive(state) if state.local and how != "goodbye" else None
        if self.registry.close(state, generation, how, self._clock(), alive):
            level = logging.INFO if how == "goodbye" else logging.WARNING
            log.log(level, "worker %s (pid %d) stream ended: %s", state.key, state.hello.pid, how)

    @staticmethod
    async def _still_alive(state: WorkerState, settle_s: float = 0.5) -> bool:
        """Whether the worker's process outlives its stream.

        A dying process closes its sockets before it becomes a zombie, so the
        stream can end a few ms before the pid looks gone: look again briefly.
        """
        deadline = time.monotonic() + settle_s
        while pid_alive(state.hello.pid):
            if time.monotonic() >= deadline:
                return True
            await asyncio.sleep(0.02)
        return False

    def _open(
        self, first: Any, context: Any
    ) -> tuple[WorkerState | None, tuple[grpc.StatusCode, str] | None]:
        if isinstance(first, Malformed):
            return None, (
                grpc.StatusCode.INVALID_ARGUMENT,
                f"malformed WorkerMessage: {first.error}",
            )
        if first.WhichOneof("body") != "hello":
            return None, (
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the first message must be a Hello, got {first.WhichOneof('body') or 'nothing'}",
            )
        try:
            state = self.registry.open(convert.hello_from_pb(first.hello), self._clock())
        except RegistryError as err:
            return None, (getattr(grpc.StatusCode, err.code), str(err))
        state.local = state.hello.host == self._hostname and pid_alive(state.hello.pid)
        state.proc_start_ticks = proc_start_ticks(state.hello.pid) if state.local else None
        log.info(
            "worker %s connected: pid %d on %s, world size %d",
            state.key,
            state.hello.pid,
            state.hello.host,
            state.hello.world_size,
        )
        return state, None

    async def _read(
        self, state: WorkerState, request_iterator: Any
    ) -> tuple[str, tuple[grpc.StatusCode, str] | None]:
        """Consume the stream; return how it ended and the error to send, if any."""
        async for msg in request_iterator:
            if isinstance(msg, Malformed):
                return "rejected", (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"malformed WorkerMessage ({msg.size} bytes): {msg.error}",
                )
            kind = msg.WhichOneof("body")
            if kind == "report":
                report = convert.report_from_pb(msg.report)
                try:
                    self.registry.apply(state, report, self._clock())
                except ValidationError as err:
                    return "rejected", (grpc.StatusCode.INVALID_ARGUMENT, f"bad report: {err}")
                for listener in self.report_listeners:
                    try:
                        listener(state, report)
                    except Exception:
                        log.exception("report listener %r failed", listener)
            elif kind == "command_result":
                self.commander.resolve(msg.command_result)
            elif kind == "goodbye":
                return "goodbye", None
            elif kind == "hello":
                return "rejected", (
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "a second Hello on one stream; open a new stream instead",
                )
        return "vanished", None
