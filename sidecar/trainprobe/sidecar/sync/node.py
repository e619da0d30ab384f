"""JobSync: this sidecar's half of the job-level view, whatever carries it.

Every ``job_sync_interval_ms``, for each job it serves, the sidecar computes
its ranks' summaries and its episode note and hands them to a
:class:`SyncTransport`, which takes them to the job's coordinator and brings
back its answers; the engine's :class:`~trainprobe.sidecar.core.job.view.JobView`
stores them, and also says what to ask: the other sidecars' ranks (the
changes since the version held) only while a rank of the job is suspect, an
episode is open or a ``diagnose`` wants them, else the job's digest. Two
transports: under Ray, a call to the job's coordinator actor per job and
sync (:mod:`trainprobe.sidecar.ray.jobsync`); outside Ray, one JobSync stream
to an upstream sidecar that hosts every job's coordinator
(:mod:`trainprobe.sidecar.sync.link`, ``job_sync_to``). Summaries are computed
on the sidecar's loop (no lock on the registry). A coordinator that cannot be
reached only means the analysis sees this sidecar's ranks. An episode that
opened and closed between two syncs (a node killing its own culprit at
once) is sent once as its last note, closed (``EpisodeNote.closed``): the
coordinator never holds it open, and an upstream traces it.

A silent rank's summary carries the kernel's word on it
(:attr:`~trainprobe.sidecar.core.judge.diagnosis.RankSummary.kernel`): this node's
verified workers that stopped reporting are read from ``/proc`` and the
freezer, as a relay node reads them (:func:`~.act.evidence.read_procs`), at
most once a second each and never for longer than a read wait per sync, so
that another node's sidecar judges a pause on every rank of the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from trainprobe.sidecar.act.evidence import read_procs
from trainprobe.sidecar.core.hang.held import NODE_READ_WAIT_S, READ_EVERY_S, held_kind
from trainprobe.sidecar.core.hang.stopped import silent_after_s
from trainprobe.sidecar.core.job.view import EpisodeNote, SyncReply
from trainprobe.sidecar.core.judge.culprit import RankSummary
from trainprobe.sidecar.core.judge.evidence import ProcSample, assess, stale_after_s
from trainprobe.sidecar.core.session.model import WorkerKey, WorkerState, heard_every_ms
from trainprobe.sidecar.engine.loop import Engine

__all__ = ["JobSync", "Payload", "SyncTransport"]

log = logging.getLogger("trainprobe.sidecar")

#: Per job: its ranks here, the episode note, whether to fetch the others'
#: ranks, and since what version (None: all of them).
Payload = dict[str, tuple[list[RankSummary], EpisodeNote | None, bool, tuple[str, int] | None]]


class SyncTransport(Protocol):
    """What carries a round of JobSync to the jobs' coordinators and back."""

    #: Whether a round can be sent now (Ray connected; always for a stream,
    #: which holds what it cannot send yet).
    @property
    def ready(self) -> bool: ...

    def served(self, jobs: Sequence[str]) -> None:
        """The jobs this sidecar serves now (forget the others)."""

    async def exchange(self, payload: Payload) -> list[tuple[str, SyncReply]]:
        """Send one round; the answers to apply, in order (a stream may apply
        what it is pushed as it arrives instead)."""
        ...

    def warn(self, job_id: str, reason: str) -> None:
        """Log once per job that it cannot sync, until it works again."""

    def close(self) -> None: ...


class JobSync:
    """Shares this sidecar's ranks with each job's coordinator and brings back the others'."""

    def __init__(
        self,
        engine: Engine,
        transport: SyncTransport,
        interval_s: float = 0.5,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.transport = transport
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._clock = clock
        #: Completed rounds (tests and status read it).
        self.rounds = 0
        #: The kernel's word on each silent verified worker: (how, read at).
        self._words: dict[WorkerKey, tuple[str, float]] = {}
        self._reading: asyncio.Future[None] | None = None
        #: Per job, the id of the last episode note handed to the transport.
        self._told: dict[str, str] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Sync every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            await self._read_silent()
            payload = self._payload()
            if self.transport.ready:
                try:
                    replies = await asyncio.wait_for(
                        self.transport.exchange(payload), self.timeout_s + 1.0
                    )
                except Exception as err:  # a slow or broken transport must not stop the loop
                    self.transport.warn("*", f"{type(err).__name__}: {err}")
                    replies = []
                now = self._clock()
                view = self.engine.job_view
                for job_id, reply in replies:
                    if view is not None:
                        view.update(job_id, reply, now)
                self.rounds += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    def _payload(self) -> Payload:
        now = self._clock()
        engine = self.engine
        jobs = sorted({w.hello.job_id for w in self.engine.registry})
        self.transport.served(jobs)
        workers = {w.key: w for w in engine.registry}
        for key in self._words.keys() - workers.keys():
            del self._words[key]
        view = engine.job_view
        payload: Payload = {}
        for job in jobs:
            mine = [self._with_word(job, s, workers, now) for s in engine.local_summaries(job, now)]
            # A local rank gone silent may be stopped: its finding waits for the others'.
            needed = engine.episode(job) is not None or any(
                now - w.last_report_at > silent_after_s(heard_every_ms(w))
                for w in workers.values()
                if w.hello.job_id == job and w.local and w.connected and not w.ended
            )
            detail, since = view.ask(job, mine, needed, now) if view is not None else (True, None)
            payload[job] = (mine, self._note(job), detail, since)
        for job in self._told.keys() - set(jobs):
            del self._told[job]
        return payload

    def _note(self, job: str) -> EpisodeNote | None:
        """The job's note; or, once, the closed note of an episode that opened and
        closed since the last round (the coordinator never held it open: without
        it, the upstream could not trace the most common incident, a node
        killing its own culprit at once)."""
        note, closed = self.engine.note(job), self.engine.closed_note(job)
        told = self._told.get(job, "")
        if note is None and closed is not None and closed.id != told:
            note = closed
        self._told[job] = note.id if note is not None else told
        return note

    def _with_word(
        self, job: str, s: RankSummary, workers: dict[WorkerKey, WorkerState], now: float
    ) -> RankSummary:
        """``s`` with the kernel's word on it, if read since its last report."""
        key = WorkerKey(job, s.rank)
        w, word = workers.get(key), self._words.get(key)
        if w is None or word is None or word[1] < w.last_report_at:
            return s  # unread, or it reported since: its report is the newer word
        return replace(s, kernel=word[0], kernel_age_s=round(max(0.0, now - word[1]), 3))

    async def _read_silent(self) -> None:
        """Read this node's silent verified workers that are due (one read a
        second each), waiting at most a read wait: a stuck /proc read (a hung
        NFS mount) costs a thread and a later sync, never the sync loop."""
        if self._reading is None or self._reading.done():
            now = self._clock()
            due = [
                w
                for w in self.engine.registry
                if w.local
                and w.connected
                and not w.ended
                and now - w.last_report_at > stale_after_s(heard_every_ms(w))
                and now - self._words.get(w.key, ("", float("-inf")))[1] >= READ_EVERY_S
            ]
            if not due:
                return
            self._reading = asyncio.ensure_future(self._read(due, now))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._reading), NODE_READ_WAIT_S)

    async def _read(self, due: list[WorkerState], at: float) -> None:
        try:
            targets = [(w.hello.pid, w.proc_start_ticks) for w in due]
            read = await asyncio.to_thread(read_procs, targets)
        except Exception:  # never the sync loop's end: the next sync reads again
            log.exception("reading silent workers from /proc failed")
            return
        for w, (state, cpu, rchar, rbytes, hz, frozen) in zip(due, read, strict=True):
            ev = assess(0, [ProcSample(at, state, cpu, rchar, rbytes, hz, frozen)], [], False)
            alive = ev.state not in ("", "zombie", "gone", "exiting")
            how = held_kind(ev) or ("running" if alive else "")
            if how:
                self._words[w.key] = (how, at)
            else:
                self._words.pop(w.key, None)

    def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        self.transport.close()
