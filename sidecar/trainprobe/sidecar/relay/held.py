"""Held workers over the relay: the node's reads, and the upstream taking them.

A job whose ranks are all held at once (SIGSTOP, a tracer, a cgroup freezer)
is paused, not hung, and that is the kernel's word. For a relayed rank only
its node can read it: :class:`NodeHeld` reads the node's verified workers with
the same ``/proc`` and freezer reads an evidence round does
(:func:`~trainprobe.sidecar.act.evidence.read_procs`), judged by the same
:func:`~trainprobe.sidecar.core.judge.evidence.assess`, and sends the result as
``RelayBatch.held``. When to read and what to send is the pure
:class:`~trainprobe.sidecar.core.hang.held.HeldWatch`. :func:`take_held` is the
upstream's half: bounded, and taken only for a session that the Relay stream
carrying it vouched for and owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.act.evidence import read_procs
from trainprobe.sidecar.core.hang.held import NODE_READ_WAIT_S, HeldWatch, held_kind
from trainprobe.sidecar.core.judge.evidence import ProcSample, assess
from trainprobe.sidecar.core.limits import MAX_HELD_AGE_MS
from trainprobe.sidecar.core.session.model import WorkerState
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.core.session.validate import ValidationError, validate_held

__all__ = ["NodeHeld", "take_held"]

log = logging.getLogger("trainprobe.sidecar")

_HOW_PB = {
    "": probe_pb2.HELD_NONE,
    "stopped": probe_pb2.HELD_STOPPED,
    "traced": probe_pb2.HELD_TRACED,
    "frozen": probe_pb2.HELD_FROZEN,
}
_HOW_NAME = {v: k for k, v in _HOW_PB.items()}


class NodeHeld:
    """A relay node's reads of its verified workers' processes, off the event loop."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.watch = HeldWatch()
        self._clock = clock
        #: stream id -> (pid, start ticks) of each worker this node verified.
        self._pids: dict[int, tuple[int, int | None]] = {}
        self._task: asyncio.Future[None] | None = None

    def add(self, sid: int, pid: int, start_ticks: int | None, interval_ms: int) -> None:
        self._pids[sid] = (pid, start_ticks)
        self.watch.watch(sid, interval_ms, self._clock())

    def heard(self, sid: int) -> None:
        self.watch.heard(sid, self._clock())

    def forget(self, sid: int) -> None:
        self._pids.pop(sid, None)
        self.watch.forget(sid)

    async def poll(self, wait_s: float = NODE_READ_WAIT_S) -> None:
        """Read the workers that are due (silent or held), waiting at most
        ``wait_s`` for the read (a later batch carries it otherwise): a stuck
        /proc read (a process in a hung NFS mount) costs a thread and a later
        batch, never the batch loop."""
        if self._task is None or self._task.done():
            now = self._clock()
            due = [sid for sid in self.watch.due(now) if sid in self._pids]
            if not due:
                return
            self._task = asyncio.ensure_future(self._read(due, now))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), wait_s)

    async def _read(self, sids: list[int], at: float) -> None:
        try:
            read = await asyncio.to_thread(read_procs, [self._pids[s] for s in sids])
        except Exception:  # never the batch loop's end: the next cadence reads again
            log.exception("reading workers %s from /proc failed", sids)
            return
        for sid, (state, cpu, rchar, rbytes, hz, frozen) in zip(sids, read, strict=True):
            ev = assess(0, [ProcSample(at, state, cpu, rchar, rbytes, hz, frozen)], [], True)
            self.watch.seen(sid, held_kind(ev), at)

    def pb(self) -> list[probe_pb2.HeldWorker]:
        """The updates not sent yet, for the next batch (a read too old to mean
        anything now is left out: the upstream's word expires anyway)."""
        out = []
        for sid, how, age_s in self.watch.updates(self._clock()):
            age_ms = int(age_s * 1000)
            if age_ms <= MAX_HELD_AGE_MS:
                out.append(probe_pb2.HeldWorker(stream_id=sid, how=_HOW_PB[how], age_ms=age_ms))
        return out

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


def take_held(
    link: object,
    sessions: Mapping[int, tuple[WorkerState, int]],
    held: Any,
    now: float,
) -> tuple[grpc.StatusCode, str] | None:
    """A batch's held workers onto their sessions; a refusal of the relay stream
    if they are out of bounds (not attributable to one worker).

    Taken only for a live session this Relay stream (``link``) vouched for and
    owns (:attr:`WorkerState.node`): an unvouched session, or a stream id of
    another stream's rank, is ignored, so no stream can make another's rank
    look held (paused, never killed) or stopped (killed at once).
    """
    try:
        validate_held([(h.how, h.age_ms) for h in held], len(_HOW_NAME))
    except ValidationError as err:
        return grpc.StatusCode.INVALID_ARGUMENT, f"bad RelayBatch.held: {err}"
    for h in held:
        entry = sessions.get(h.stream_id)
        if entry is None:
            continue
        state, generation = entry
        if state.node is not link or not state.connected or state.generation != generation:
            continue
        how = _HOW_NAME[h.how]
        Registry.set_held(state, (how, now - h.age_ms / 1000.0) if how else None)
    return None
