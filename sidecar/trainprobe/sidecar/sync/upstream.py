"""Summary mode's upstream end: the ``JobSync`` RPC, every job's coordinator.

Every sidecar serves it. A node sidecar with ``job_sync_to`` keeps one
stream here; each of its messages goes through the pure
:class:`~trainprobe.sidecar.core.job.hub.SummaryHub`, which holds one
:class:`~trainprobe.sidecar.core.job.view.CoordinatorState` per job, and
its answers go back on the stream, its pushes on the other nodes' streams
(each a bounded outbox: a node that does not read misses a push, and is
answered again at its next upload). Who may connect is the server's
business, as for ``Relay``: the bearer token over TCP (with TLS), the
socket's permissions over Unix. A message the hub refuses, or one that does
not parse, ends its stream with a status that says why; the other streams
and the summaries held are untouched. Client strings in those statuses and
in the log are escaped (:func:`~trainprobe.sidecar.core.text.printable`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import grpc

from trainprobe.proto import JOB_SYNC_ACCEPTED_KEY, probe_pb2
from trainprobe.sidecar.core.job.hub import Push, Refused, SummaryHub
from trainprobe.sidecar.core.job.view import SyncReply
from trainprobe.sidecar.core.text import printable
from trainprobe.sidecar.sync.wire import reply_pb, uploads_of
from trainprobe.sidecar.transport.listen.identity import TicketDesk
from trainprobe.sidecar.transport.session_open import node_stream_refusal
from trainprobe.sidecar.transport.streams import Malformed, pump, safe_parser

__all__ = ["OUTBOX", "JobSyncUpstream"]

log = logging.getLogger("trainprobe.sidecar")

#: Answers and pushes waiting to go down one stream.
OUTBOX = 64
#: How often the hub is asked for pushes of new analyses (a large job's incident).
TICK_S = 0.25

#: Shared answers kept serialized (the current analyses of the large jobs, and
#: the few verdicts naming a node's own culprits).
SHARED_KEPT = 256

#: What goes down a stream: an answer, or a push serialized once for every node.
Down = probe_pb2.JobSyncDown | bytes


def _serialize(down: Down) -> bytes:
    return down if isinstance(down, bytes) else down.SerializeToString()


Refusal = tuple[grpc.StatusCode, str]


class JobSyncUpstream:
    """Implements the ``JobSync`` RPC (see the module docstring)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, tickets: TicketDesk | None = None
    ) -> None:
        self._clock = clock
        #: Whose sockets are open to other users (a node stream is refused there).
        self._tickets = tickets
        self.hub = SummaryHub(secrets.token_hex(6))
        self._outs: dict[str, asyncio.Queue[Down]] = {}
        self._ticker: asyncio.Task[None] | None = None
        #: id(reply) -> (reply, job, bytes): each shared answer serialized once.
        self._shared: dict[int, tuple[SyncReply, str, bytes]] = {}
        #: Streams ended for a refused message, and pushes a full outbox missed.
        self.refused = 0
        self.missed_pushes = 0
        #: Streams a node opened (joined the hub) since start.
        self.joined = 0

    def status(self) -> probe_pb2.JobSyncHubStatus | None:
        """The hub as ``trainprobe status`` shows it: counts only (no node's or
        job's name, so nothing a node sent); None until a node has tried."""
        if not self.joined and not self.refused:
            return None
        return probe_pb2.JobSyncHubStatus(
            nodes=len(self.hub),
            jobs=len(self.hub.jobs),
            ranks=self.hub.ranks(),
            refused=self.refused,
            missed_pushes=self.missed_pushes,
        )

    def ranks_by_job(self) -> dict[str, int]:
        """Ranks held per job (the job-level metric; at most MAX_SYNC_JOBS, ids
        checked by the hub to at most MAX_ID_LEN characters), each id escaped:
        a node's string reaches the scrape as visible text."""
        held: dict[str, int] = {}
        for job, state in self.hub.jobs.items():
            label = printable(job)
            held[label] = held.get(label, 0) + len(state.store)
        return held

    def methods(self) -> dict[str, grpc.RpcMethodHandler]:
        return {
            "JobSync": grpc.stream_stream_rpc_method_handler(
                self.JobSync,
                request_deserializer=safe_parser(probe_pb2.JobSyncUp),
                response_serializer=_serialize,
            )
        }

    async def JobSync(self, request_iterator: Any, context: Any) -> None:
        refusal = node_stream_refusal(str(context.peer()), self._tickets, "JobSync")
        if refusal is not None:
            self.refused += 1
            log.warning("refused job sync from %s: %s", context.peer(), refusal[1])
            await context.abort(*refusal)
            return
        out: asyncio.Queue[Down] = asyncio.Queue(OUTBOX)
        node: list[str] = []
        # Past the server's token check: the node counts its stream up only now.
        await context.send_initial_metadata(((JOB_SYNC_ACCEPTED_KEY, "1"),))
        try:
            error = await pump(context.write, self._read(node, out, request_iterator), out)
        finally:
            if node:
                self.hub.leave(node[0])
                self._outs.pop(node[0], None)
        if error is not None:
            self.refused += 1
            who = printable(node[0]) if node else "?"
            log.warning("refused job sync from %s (node %s): %s", context.peer(), who, error[1])
            await context.abort(*error)

    async def _read(
        self, node: list[str], out: asyncio.Queue[Down], messages: Any
    ) -> Refusal | None:
        async for msg in messages:
            if isinstance(msg, Malformed):
                return grpc.StatusCode.INVALID_ARGUMENT, f"malformed JobSyncUp: {msg.error}"
            try:
                if not node:
                    self.hub.join(msg.node_id)
                    node.append(msg.node_id)
                    self.joined += 1
                    self._outs[msg.node_id] = out
                    if self._ticker is None or self._ticker.done():
                        self._ticker = asyncio.ensure_future(self._tick())
                elif msg.node_id != node[0]:
                    raise Refused("INVALID_ARGUMENT", "node_id changed within a stream")
                replies, pushes = self.hub.apply(
                    node[0], uploads_of(msg), msg.refresh_s, self._clock()
                )
            except Refused as r:
                return getattr(grpc.StatusCode, r.code), r.details
            del msg
            if replies:
                down = self._encoded(replies)
                try:
                    out.put_nowait(down)
                except asyncio.QueueFull:
                    return grpc.StatusCode.RESOURCE_EXHAUSTED, "the node does not read its answers"
            self._send(pushes)
        return None

    async def _tick(self) -> None:
        """Push new analyses of large jobs in an incident (SummaryHub.tick) while
        any node is connected."""
        while len(self.hub):
            await asyncio.sleep(TICK_S)
            try:
                self._send(self.hub.tick(self._clock()))
            except Exception:  # a failed tick must not end the pushes of every job
                log.exception("job sync: pushing new analyses failed")

    def _send(self, pushes: list[Push]) -> None:
        for other, job, reply in pushes:
            q = self._outs.get(other)
            if q is None:
                continue
            try:
                q.put_nowait(self._encoded([(job, reply)]))
            except asyncio.QueueFull:
                self.missed_pushes += 1
                self.hub.missed(other, job)

    def _encoded(self, replies: list[tuple[str, SyncReply]]) -> Down:
        """The message for ``replies``. A large job's analysis goes to every node
        of the job (12,500 at the largest) as one reply object: serialized once."""
        if len(replies) != 1 or replies[0][1].verdict is None:
            return probe_pb2.JobSyncDown(jobs=[reply_pb(j, r) for j, r in replies])
        job, reply = replies[0]
        hit = self._shared.get(id(reply))
        if hit is not None and hit[0] is reply and hit[1] == job:
            return hit[2]
        data = probe_pb2.JobSyncDown(jobs=[reply_pb(job, reply)]).SerializeToString()
        if len(self._shared) >= SHARED_KEPT:
            self._shared.clear()
        self._shared[id(reply)] = (reply, job, data)
        return data
