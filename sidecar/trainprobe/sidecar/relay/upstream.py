"""The upstream end of ``Relay``: a node sidecar's worker streams as sessions.

Each relayed worker stream becomes a session exactly as if it had come over
``Connect``: the same :meth:`SidecarServicer.open_session` / ``handle`` /
``end_session``, the same report listeners and command queues. What differs
is where things go: commands and kill orders travel down the relay stream,
tagged with the worker's stream id, and a refused worker stream gets a
``RelayReject`` while the relay and its other workers go on. A relay
stream's own queue and kill orders are :mod:`.routes`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from trainprobe.proto import RELAY_ACCEPTED_KEY, probe_pb2
from trainprobe.sidecar.core.session.model import VerifiedProcess, WorkerState
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.relay.held import take_held
from trainprobe.sidecar.relay.routes import NodeStream, RelayRoute
from trainprobe.sidecar.transport.servicer import Ending, Refusal, SidecarServicer
from trainprobe.sidecar.transport.session_open import node_stream_refusal
from trainprobe.sidecar.transport.streams import Malformed, pump, safe_parser

log = logging.getLogger("trainprobe.sidecar")

#: How a session ends when the relay stream that carried it ends: the worker's
#: fate is unknown (its node may only have lost the connection), so it is not
#: DEAD; the heartbeat rule judges it if its node does not come back.
RELAY_LOST = "relay_lost"
#: The longest batch interval taken from a node (the node's own option allows
#: 10 s): beyond it a node could keep its silent workers looking fresh.
MAX_RELAY_INTERVAL_MS = 10_000
__all__ = ["MAX_RELAY_INTERVAL_MS", "RELAY_LOST", "RelayUpstream"]

_parse_worker_message = safe_parser(probe_pb2.WorkerMessage)


class RelayUpstream:
    """Implements the ``Relay`` RPC on top of a :class:`SidecarServicer`."""

    def __init__(
        self, servicer: SidecarServicer, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.servicer = servicer
        self._clock = clock
        #: Reports that relaying nodes said they dropped, over this sidecar's life.
        self.dropped_reports = 0

    def methods(self) -> dict[str, grpc.RpcMethodHandler]:
        """``Relay``, for :meth:`SidecarServicer.handler`."""
        return {
            "Relay": grpc.stream_stream_rpc_method_handler(
                self.Relay,
                request_deserializer=safe_parser(probe_pb2.RelayBatch),
                response_serializer=probe_pb2.RelayCommand.SerializeToString,
            )
        }

    async def Relay(self, request_iterator: Any, context: Any) -> None:
        refusal = node_stream_refusal(str(context.peer()), self.servicer.tickets, "Relay")
        if refusal is not None:
            log.warning("refused relay stream from %s: %s", context.peer(), refusal[1])
            await context.abort(*refusal)
            return
        link = NodeStream(context.peer())
        sessions: dict[int, tuple[WorkerState, int]] = {}
        log.info("relay stream from %s opened", link.peer)
        # The node waits for this before it sends a batch, so a refusal (a
        # wrong token) costs it no reports and is not mistaken for a link.
        await context.send_initial_metadata(((RELAY_ACCEPTED_KEY, "1"),))
        error: Refusal | None = None
        try:
            reader = self._read(link, sessions, request_iterator)
            error = await pump(context.write, reader, link.out)
        finally:
            link.close()
            for state, generation in sessions.values():
                self.servicer.commander.detach(state.key, generation)
                self.servicer.end_session(state, generation, RELAY_LOST, None)
            log.warning("relay stream from %s ended with %d live workers", link.peer, len(sessions))
        if error is not None:
            log.warning("rejected relay stream from %s: %s", link.peer, error[1])
            await context.abort(*error)

    async def _read(
        self, link: NodeStream, sessions: dict[int, tuple[WorkerState, int]], batches: Any
    ) -> Refusal | None:
        refused: set[int] = set()
        async for batch in batches:
            if isinstance(batch, Malformed):
                # Not attributable to one worker: the node must start afresh.
                return grpc.StatusCode.INVALID_ARGUMENT, f"malformed RelayBatch: {batch.error}"
            refusal = self._apply(link, sessions, refused, batch)
            # Not held while this waits for the next one: the batch's upb arena
            # (C memory: every item's bytes, ~10 KiB a relayed session) per node.
            del batch
            if refusal is not None:
                return refusal
        return None

    def _apply(
        self,
        link: NodeStream,
        sessions: dict[int, tuple[WorkerState, int]],
        refused: set[int],
        batch: probe_pb2.RelayBatch,
    ) -> Refusal | None:
        if batch.dropped_reports:
            self.dropped_reports += batch.dropped_reports
            log.warning("relay %s dropped %d reports", link.peer, batch.dropped_reports)
        interval_ms = min(batch.interval_ms, MAX_RELAY_INTERVAL_MS)
        if interval_ms != link.interval_ms:
            self._interval(link, sessions, interval_ms)
        handle, parse, session = self.servicer.handle, _parse_worker_message, sessions.get
        for item in batch.items:
            entry = session(item.stream_id)
            # The common case, kept short: a message of an open session. Its
            # bytes are b"" when the body is another kind (or an empty message,
            # which _item handles): no WhichOneof per item.
            if entry is not None:
                data = item.message
                if data:
                    ending = handle(entry[0], parse(data))
                    if ending is not None:
                        self._close(link, sessions, refused, item.stream_id, ending)
                    continue
            self._item(link, sessions, refused, item)
        if batch.held:  # after the items: a worker's Hello comes before its word
            return take_held(link, sessions, batch.held, self._clock())
        return None

    def _item(
        self,
        link: NodeStream,
        sessions: dict[int, tuple[WorkerState, int]],
        refused: set[int],
        item: probe_pb2.RelayItem,
    ) -> None:
        """Any item but a non-empty message of an open session."""
        sid = item.stream_id
        body = item.WhichOneof("body")
        entry = sessions.get(sid)
        if entry is not None and body == "message":
            ending = self.servicer.handle(entry[0], _parse_worker_message(item.message))
            if ending is not None:
                self._close(link, sessions, refused, sid, ending)
        elif sid in refused:
            return
        elif body == "message":
            vouch = item.vouch if item.HasField("vouch") else None
            self._open(link, sessions, refused, sid, item.message, vouch)
        elif body == "ended":
            self._end(sessions, sid, "vanished", item.ended.pid_alive)
        elif body == "kill_result":
            link.resolve(item.kill_result)

    def _open(
        self,
        link: NodeStream,
        sessions: dict[int, tuple[WorkerState, int]],
        refused: set[int],
        sid: int,
        data: bytes,
        vouch: probe_pb2.Vouch | None,
    ) -> None:
        """The first message of a stream: it opens the session, or is refused.

        A vouched Hello is verified by this node stream, which then owns the
        rank: its route is the only one the session's kill order takes.
        """
        route = RelayRoute(link, sid)
        vouched = None
        if vouch is not None and vouch.pid > 0:
            vouched = VerifiedProcess(vouch.pid, vouch.uid, vouch.start_ticks or None)
        state, refusal = self.servicer.open_session(
            _parse_worker_message(data), route, vouched, link
        )
        if state is None:
            self._refuse(link, refused, sid, refusal)
            return
        sessions[sid] = (state, state.generation)
        Registry.set_held(state, None)  # a new stream's word only
        Registry.set_relay_interval(state, link.interval_ms)
        self.servicer.commander.attach(state.key, state.generation, route)

    @staticmethod
    def _interval(
        link: NodeStream, sessions: dict[int, tuple[WorkerState, int]], interval_ms: int
    ) -> None:
        """The node said a new batch interval (its first batch, or a node restarted
        with another setting): its workers are heard from that often at best."""
        link.interval_ms = interval_ms
        for state, _ in sessions.values():
            Registry.set_relay_interval(state, interval_ms)

    def _close(
        self,
        link: NodeStream,
        sessions: dict[int, tuple[WorkerState, int]],
        refused: set[int],
        sid: int,
        ending: Ending,
    ) -> None:
        self._end(sessions, sid, ending[0], None)
        if ending[1] is not None:
            self._refuse(link, refused, sid, ending[1])

    def _end(
        self, sessions: dict[int, tuple[WorkerState, int]], sid: int, how: str, alive: bool | None
    ) -> None:
        entry = sessions.pop(sid, None)
        if entry is not None:
            self.servicer.commander.detach(entry[0].key, entry[1])
            self.servicer.end_session(entry[0], entry[1], how, alive)

    @staticmethod
    def _refuse(link: NodeStream, refused: set[int], sid: int, refusal: Refusal | None) -> None:
        if refusal is None:
            return
        code, details = refusal
        refused.add(sid)
        log.warning("rejected %s from relay %s stream %d: %s", code.name, link.peer, sid, details)
        reject = probe_pb2.RelayReject(code=code.name, details=details)
        link.out.put_nowait(probe_pb2.RelayCommand(stream_id=sid, reject=reject))
