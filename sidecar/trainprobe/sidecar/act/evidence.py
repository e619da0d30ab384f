"""Gathering a suspect job's evidence: /proc samples and stack samples, per rank.

The pure half (what the samples mean) is :mod:`trainprobe.sidecar.core.judge.evidence`.
Here the samples are taken without blocking the event loop: /proc is read in a
worker thread (a stuck /proc read, e.g. of a process in a hung NFS mount, then
costs a thread, not the loop), and stacks come from the
:class:`~trainprobe.sidecar.act.stacks.StackCollector`, whose reads are all
bounded by timeouts. Every history is bounded (:data:`KEEP` samples a rank).
A relayed rank's kernel state is its node's word (:func:`relayed_samples`):
the node reads it with :func:`read_procs` too.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from trainprobe.sidecar.act.cgroups import frozen
from trainprobe.sidecar.act.pidproc import stat_fields
from trainprobe.sidecar.act.procs import proc_sample, proc_start_ticks
from trainprobe.sidecar.core.hang.held import relayed_samples
from trainprobe.sidecar.core.judge.evidence import (
    ProcSample,
    RankEvidence,
    StackSample,
    assess,
    stale_after_s,
)
from trainprobe.sidecar.core.judge.stackframes import parse_stacks, training_thread
from trainprobe.sidecar.core.session.model import WorkerState, heard_every_ms

__all__ = ["KEEP", "EvidenceGatherer", "StackReader", "read_procs", "read_states"]

#: Samples kept per rank: enough to compare stacks and measure CPU over a few seconds.
KEEP = 4
#: Seconds between the first round's two /proc reads.
FIRST_GAP_S = 0.3


class StackReader(Protocol):
    """What reads a rank's stacks (:class:`~trainprobe.sidecar.act.stacks.StackCollector`)."""

    async def collect(
        self, state: WorkerState, signals: bool = True, flight_recorder: bool = True
    ) -> dict[str, object]: ...


def read_procs(targets: Sequence[tuple[int, int | None]]) -> list[tuple]:
    """(state letter, cpu ticks, rchar, read_bytes, ticks a second, frozen) of each
    (pid, start ticks): blocking reads, for a worker thread."""
    out = []
    for pid, start in targets:
        sample = proc_sample(pid)
        # A reused pid is another process: for us, ours is gone.
        if sample[0] and start is not None and proc_start_ticks(pid) not in (None, start):
            sample = ("", 0, None, None, sample[4])
        out.append((*sample, frozen(pid) if sample[0] else None))
    return out


def read_states(targets: Sequence[tuple[int, int | None]]) -> list[str]:
    """The kernel's state letter of each (pid, start ticks), "" where gone or the
    pid was reused: one read of ``/proc/<pid>/stat`` each, for a worker thread
    (the engine's early read of silent ranks: ``core/hang/stopped.py``)."""
    out = []
    for pid, start in targets:
        fields = stat_fields(pid) if pid > 0 else None
        try:
            same = fields is not None and (start is None or int(fields[19]) == start)
        except (IndexError, ValueError):
            same = False
        out.append(fields[0].decode(errors="replace")[:1] if fields and same else "")
    return out


class EvidenceGatherer:
    """Samples ranks round after round; one instance per watched episode."""

    def __init__(
        self,
        stacks: StackReader | None,
        clock: Callable[[], float] = time.monotonic,
        signals: bool = False,
    ) -> None:
        self.stacks = stacks
        self._clock = clock
        #: Whether a stack read may send the hook's stack signal: only when the
        #: episode's action may act at all (not a dry run, not observe).
        self.signals = signals
        self._procs: dict[int, deque[ProcSample]] = {}
        self._frames: dict[int, deque[StackSample]] = {}
        #: The latest stack record per rank (what the incident shows).
        self.records: dict[int, dict[str, object]] = {}
        self.stacks_s = 0.0

    async def round(
        self,
        states: Sequence[WorkerState],
        with_stacks: bool = True,
        stack_ranks: Collection[int] | None = None,
        culprits: Collection[int] = (),
    ) -> dict[int, RankEvidence]:
        """One sample of every rank in ``states``; the evidence so far.

        Stacks are read of ``stack_ranks`` (all when None), with the Flight
        Recorder's entries only for ``culprits``.
        """
        local = [w for w in states if w.local]
        # CPU progress needs two reads: the first round takes its second one
        # FIRST_GAP_S later, while the stacks are read.
        first = any(w.hello.rank not in self._procs for w in local)
        reads = [self._read(local)]
        if with_stacks and self.stacks is not None:
            wanted = [w for w in states if stack_ranks is None or w.hello.rank in stack_ranks]
            reads.append(self._sample_stacks(wanted, culprits))
        if first:
            reads.append(self._read(local, delay_s=FIRST_GAP_S))
        await asyncio.gather(*reads)
        now = self._clock()
        return {
            w.hello.rank: assess(
                w.hello.rank,
                list(self._procs.get(w.hello.rank, ())) if w.local else relayed_samples(w, now),
                list(self._frames.get(w.hello.rank, ())),
                reporter_alive=w.connected
                and now - w.last_report_at <= stale_after_s(heard_every_ms(w)),
            )
            for w in states
        }

    async def kernel_states(self, states: Sequence[WorkerState]) -> dict[int, RankEvidence]:
        """One ``/proc`` read (state, freezer) of each local rank in ``states``,
        no stacks and no history: the ranks past the sampled ones, whose only
        question is whether the kernel holds them (a pause, or not)."""
        local = [w for w in states if w.local]
        if not local:
            return {}
        targets = [(w.hello.pid, w.proc_start_ticks) for w in local]
        read = await asyncio.to_thread(read_procs, targets)
        now = self._clock()
        return {
            w.hello.rank: assess(
                w.hello.rank,
                [ProcSample(now, state, cpu, rchar, rbytes, hz, held)],
                [],
                reporter_alive=w.connected
                and now - w.last_report_at <= stale_after_s(heard_every_ms(w)),
            )
            for w, (state, cpu, rchar, rbytes, hz, held) in zip(local, read, strict=True)
        }

    async def _read(self, local: Sequence[WorkerState], delay_s: float = 0.0) -> None:
        if delay_s:
            await asyncio.sleep(delay_s)
        targets = [(w.hello.pid, w.proc_start_ticks) for w in local]
        read = await asyncio.to_thread(read_procs, targets)
        at = self._clock()
        for w, (state, cpu, rchar, rbytes, hz, held) in zip(local, read, strict=True):
            history = self._procs.setdefault(w.hello.rank, deque(maxlen=KEEP))
            history.append(ProcSample(at, state, cpu, rchar, rbytes, hz, held))

    async def _sample_stacks(
        self, states: Sequence[WorkerState], culprits: Collection[int]
    ) -> None:
        # A rank that is gone or stopped has nothing more to say: its first stack stands.
        # A relayed rank its node says is held cannot answer the command at all.
        now = self._clock()
        readable = [
            w
            for w in states
            if not w.ended and not self._frozen(w.hello.rank) and not relayed_samples(w, now)
        ]
        if not readable:
            return
        t0 = self._clock()
        records = await asyncio.gather(
            *(
                self.stacks.collect(  # type: ignore[union-attr]
                    w, signals=self.signals, flight_recorder=w.hello.rank in culprits
                )
                for w in readable
            ),
            return_exceptions=True,
        )
        self.stacks_s = round(self._clock() - t0, 3)
        at = self._clock()
        for w, rec in zip(readable, records, strict=True):
            if isinstance(rec, BaseException):
                rec = {"method": "", "error": repr(rec)}
            self.records[w.hello.rank] = rec
            text = str(rec.get("stacks") or "")
            ids = tuple(i for i in (w.hello.thread_id, w.hello.thread_native_id) if i)
            main = training_thread(parse_stacks(text), ids) if text else None
            if main is not None:
                history = self._frames.setdefault(w.hello.rank, deque(maxlen=KEEP))
                where, method = str(rec.get("where") or ""), str(rec.get("method") or "")
                history.append(StackSample(at, main.frames, where, method))

    def _frozen(self, rank: int) -> bool:
        procs = self._procs.get(rank)
        if not procs or not self._frames.get(rank):
            return False
        return procs[-1].state in ("T", "Z", "X", "") or bool(procs[-1].frozen)
