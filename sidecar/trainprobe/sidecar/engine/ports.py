"""What the engine acts through: the protocols its runner applies effects by.

The engine never names a class of ``act/`` (the kills, stacks, /proc samples
and the incident log): its runner (:mod:`.runner`) holds these protocols,
and the composition root (``server.py``) hands it the real ones. This is
the only module of the engine that imports ``act/`` (tests/test_imports.py
checks), and only to make the default evidence gatherer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.judge.evidence import RankEvidence
from trainprobe.sidecar.core.session.model import WorkerState

__all__ = [
    "ActionRunner",
    "Gatherer",
    "GathererFactory",
    "IncidentLogPort",
    "IncidentSink",
    "StackSource",
    "StateReader",
    "evidence_gatherers",
    "proc_states",
]


class IncidentLogPort(Protocol):
    """The append-only incident log (``act/incident_log.py``)."""

    def write(self, record: dict[str, Any]) -> object: ...


class IncidentSink(Protocol):
    """Something that hears about incidents (exporters)."""

    def on_incident(self, incident: Incident) -> None: ...


class ActionRunner(Protocol):
    """Carries out an incident's action and an episode's sweep (``act/actions.py``)."""

    async def execute(self, incident: Incident) -> None: ...

    async def sweep(
        self,
        episode_id: str,
        job_id: str,
        ranks: list[int],
        action: str,
        incident: Incident | None = None,
        phase: str = "job_kill_grace",
    ) -> None: ...


class StackSource(Protocol):
    """A rank's stacks: in-process, py-spy, faulthandler (``act/stacks.py``)."""

    async def collect(
        self, state: WorkerState, signals: bool = True, flight_recorder: bool = True
    ) -> dict[str, object]: ...


class Gatherer(Protocol):
    """A watched episode's /proc and stack samples, round after round (``act/evidence.py``)."""

    @property
    def records(self) -> Mapping[int, dict[str, object]]:
        """The latest stack record per rank."""

    @property
    def stacks_s(self) -> float:
        """How long the last stack read took."""

    async def round(
        self,
        states: Sequence[WorkerState],
        with_stacks: bool = True,
        stack_ranks: Collection[int] | None = None,
        culprits: Collection[int] = (),
    ) -> dict[int, RankEvidence]: ...

    async def kernel_states(self, states: Sequence[WorkerState]) -> dict[int, RankEvidence]:
        """One /proc read of each local rank, no stacks: is it held?"""


#: A new gatherer for one episode; the flag says whether its stack reads may
#: send the hook's stack signal.
GathererFactory = Callable[[bool], Gatherer]


def evidence_gatherers(
    stacks: StackSource | None, clock: Callable[[], float] = time.monotonic
) -> GathererFactory:
    """The sidecar's own gatherers: /proc in a worker thread, stacks from ``stacks``."""
    from trainprobe.sidecar.act.evidence import EvidenceGatherer

    def make(signals: bool) -> Gatherer:
        return EvidenceGatherer(stacks, clock, signals)

    return make


#: The kernel's state letter of each session's process ("" where it is gone or
#: its pid was reused), read off the event loop: the early read of silent
#: local ranks (``core/hang/stopped.py``).
StateReader = Callable[[Sequence[WorkerState]], Awaitable[list[str]]]


async def proc_states(states: Sequence[WorkerState]) -> list[str]:
    """The sidecar's own :data:`StateReader`: ``/proc/<pid>/stat`` in a worker
    thread (a stuck read costs a thread, never the loop)."""
    from trainprobe.sidecar.act.evidence import read_states

    targets = [(w.hello.pid, w.proc_start_ticks) for w in states]
    return await asyncio.to_thread(read_states, targets)
