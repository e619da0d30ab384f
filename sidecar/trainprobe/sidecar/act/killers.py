"""Killers: how a worker's process is made to go away.

:class:`SignalKiller` signals the processes whose pid it verified, has a relaying
node signal the ones it relays, and asks any other worker to abort over its
own stream. The Ray integration plugs in its own killer
(:class:`~trainprobe.sidecar.ray.killer.RayKiller`); the composition root
(:mod:`trainprobe.sidecar.server`) chooses one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.act.signals import KillOutcome, terminate
from trainprobe.sidecar.core.session.model import WorkerState
from trainprobe.sidecar.transport.commander import Commander

if TYPE_CHECKING:
    from trainprobe.sidecar.ray.link import RayLink

#: How long a worker has to answer a command (a stack dump, an abort).
DUMP_TIMEOUT_S = 2.0
#: Why a kill was an Abort command rather than signals (in the action record).
NOT_VERIFIED = "pid not verified on this host (no identity ticket): asked to abort instead"


class Killer(Protocol):
    """What the sidecar needs of a killer; it calls ``start`` and ``close`` once each."""

    @property
    def link(self) -> RayLink | None:
        """The killer's line to Ray, when it has one: the sidecar then also syncs
        its jobs' views through Ray (per-node sidecars, ``--ray-address``)."""
        ...

    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        """Make the worker's process go away; describe what was done.

        The record has at least ``pid``, ``method``, ``exited`` and ``error``
        (:meth:`KillOutcome.to_record`).
        """
        ...

    def start(self) -> None: ...

    def close(self) -> None: ...


#: Builds a killer once the sidecar's command channel exists.
KillerFactory = Callable[[Commander], Killer]


class SignalKiller:
    """Signals local pids; has a relaying node signal relayed ones; asks other
    remote workers to abort over their stream."""

    link: RayLink | None = None

    def __init__(self, commander: Commander) -> None:
        self.commander = commander

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        if state.relay is not None:
            # A relayed worker: the node that relays it signals the pid and says how it went.
            record: dict[str, object] = await state.relay.kill(state.hello.pid, grace_s)
            if record["signals"] or record["exited"]:
                return record
            # Nothing signalled (another host's process; the node gone): ask the
            # worker itself over its relayed stream, as for any remote worker.
            aborted = await self._abort(state, grace_s)
            aborted["relay_error"] = record["error"]
            return aborted
        if state.local:
            outcome = await terminate(state.hello.pid, grace_s, state.proc_start_ticks)
            return outcome.to_record()
        # Never a signal on a client's word: the worker is asked over its stream.
        aborted = await self._abort(state, grace_s)
        aborted["not_signalled"] = NOT_VERIFIED
        return aborted

    async def _abort(self, state: WorkerState, grace_s: float) -> dict[str, object]:
        result = await self.commander.request(
            state.key,
            DUMP_TIMEOUT_S,
            abort=probe_pb2.Abort(reason="trainprobe kill", grace_s=grace_s),
        )
        out = KillOutcome(pid=state.hello.pid, method="abort-command", exited=False)
        out.error = "" if result is not None and result.ok else "worker did not acknowledge abort"
        return out.to_record()
