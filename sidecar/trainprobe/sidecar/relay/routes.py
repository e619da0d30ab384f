"""A node's Relay stream as the upstream sees it, and one relayed worker's route.

:class:`NodeStream` holds what goes down one relay stream (commands and kill
orders, tagged by the worker's stream id) and the kills waiting for the
node's answer; :class:`RelayRoute` is how a session reaches its worker
through it (``WorkerState.relay``, and its command sink).
"""

from __future__ import annotations

import asyncio
import itertools

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.act.signals import KillOutcome
from trainprobe.sidecar.act.tree import MAX_TREE
from trainprobe.sidecar.core.limits import MAX_DURATION_S

__all__ = ["RELAY_KILL_MARGIN_S", "NodeStream", "RelayRoute"]

#: Beyond the kill grace, how long the node has to report a kill's outcome
#: (terminate() waits up to 10 s for the pid to go after SIGKILL).
RELAY_KILL_MARGIN_S = 12.0


class NodeStream:
    """One Relay stream, upstream side: its outbound queue and pending kills."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.out: asyncio.Queue[probe_pb2.RelayCommand] = asyncio.Queue()
        self.open = True
        self._kills: dict[int, asyncio.Future[probe_pb2.RelayKillResult | None]] = {}
        self._ids = itertools.count(1)
        #: The node's batch interval as it last said (bounded by upstream.MAX_RELAY_INTERVAL_MS).
        self.interval_ms = 0

    async def kill(self, stream_id: int, pid: int, grace_s: float) -> dict[str, object]:
        """Have the node signal the worker's pid; its outcome as a kill record."""
        out = KillOutcome(pid=pid, method="relay-signal")
        if not self.open:
            out.error = f"relay stream from {self.peer} has ended; the node cannot be reached"
            return out.to_record()
        kill_id = next(self._ids)
        fut: asyncio.Future[probe_pb2.RelayKillResult | None]
        fut = asyncio.get_running_loop().create_future()
        self._kills[kill_id] = fut
        order = probe_pb2.RelayKill(kill_id=kill_id, grace_s=grace_s)
        self.out.put_nowait(probe_pb2.RelayCommand(stream_id=stream_id, kill=order))
        timeout_s = grace_s + RELAY_KILL_MARGIN_S
        try:
            result = await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            out.error = f"the relaying node did not report the kill's outcome within {timeout_s}s"
            return out.to_record()
        finally:
            self._kills.pop(kill_id, None)
        if result is None:
            out.error = f"relay stream from {self.peer} ended before the kill's outcome came"
            return out.to_record()
        # The node's word, bounded as any input is (a token holder's own stream
        # answers its own ranks' kill orders): a few signal names, one error line.
        out.signals = [s[:16] for s in result.signals[:16]]
        # Only a process held still is SIGKILLed before anything else (act/signals.py).
        out.signalled_first = "SIGKILL" if out.signals[:1] == ["SIGKILL"] else ""
        out.exited, out.error = result.exited, result.error[:1024]
        out.seconds = result.seconds if 0 <= result.seconds <= MAX_DURATION_S else 0.0
        out.skipped = [
            {"pid": c.pid, "ppid": c.ppid, "name": c.name[:64], "reason": c.reason[:1024]}
            for c in result.skipped[:MAX_TREE]
        ]
        return out.to_record()

    def resolve(self, result: probe_pb2.RelayKillResult) -> None:
        fut = self._kills.get(result.kill_id)
        if fut is not None and not fut.done():
            fut.set_result(result)

    def close(self) -> None:
        self.open = False
        for fut in self._kills.values():
            if not fut.done():
                fut.set_result(None)


class RelayRoute:
    """How the upstream reaches one relayed worker (``WorkerState.relay``).

    Also the session's command sink: a command for the worker goes down the
    relay stream tagged with its stream id.
    """

    __slots__ = ("link", "stream_id")

    def __init__(self, link: NodeStream, stream_id: int) -> None:
        self.link = link
        self.stream_id = stream_id

    def __str__(self) -> str:
        return f"{self.link.peer}#{self.stream_id}"

    def put_nowait(self, command: probe_pb2.Command) -> None:
        self.link.out.put_nowait(probe_pb2.RelayCommand(stream_id=self.stream_id, command=command))

    async def kill(self, pid: int, grace_s: float) -> dict[str, object]:
        return await self.link.kill(self.stream_id, pid, grace_s)
