"""What the hang machine asks for, and what comes back to it: plain data.

:func:`~trainprobe.sidecar.core.hang.machine.step` decides and returns *effects*;
it never writes a log, signals a process, reads a stack or touches a
session. The engine's runner (``engine/runner.py``) applies them in order,
and feeds the slow ones' results back (:class:`EvidenceRound`,
:class:`StacksRead`) as the ``evidence`` of a later step. Effects hold
references to the core's own objects (a session, an incident, an
episode): they name what to act on, they do not copy it.

What a hang's configuration lets it ask for is decided here too, once for
the machine and its evidence rounds: whether a stack read may signal
(:func:`signals_for`) and whether a kill is announced (:func:`kill_decided`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.hang.episodes import Episode
from trainprobe.sidecar.core.hang.records import LogRecord
from trainprobe.sidecar.core.hang.state import HangConfig
from trainprobe.sidecar.core.incident.actions import is_destructive
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.judge.evidence import RankEvidence
from trainprobe.sidecar.core.session.model import Verdict, WorkerKey, WorkerState

__all__ = [
    "Effect",
    "Evidence",
    "EvidenceRound",
    "ExecuteAction",
    "Inspect",
    "KillDecided",
    "Log",
    "MarkKill",
    "Opened",
    "Publish",
    "Record",
    "ResumeJob",
    "SetVerdict",
    "StacksRead",
    "Sweep",
    "Watch",
    "kill_decided",
    "signals_for",
]


@dataclass(frozen=True)
class SetVerdict:
    """The session of ``key`` now has ``verdict`` (``Registry.set_verdict``)."""

    key: WorkerKey
    verdict: Verdict
    rule: str


@dataclass(frozen=True)
class Record:
    """Append ``record.to_record()`` to the incident log."""

    record: LogRecord


@dataclass(frozen=True)
class Publish:
    """Log, write and export an incident (log line, incident log, sinks)."""

    incident: Incident

    @staticmethod
    def of(incident: Incident) -> Publish:
        """Publish the incident as it is now: a later change of the same step
        (the decision that follows its first round) is not in what is published."""
        d, dec = incident.diagnosis, incident.decision
        return Publish(
            replace(
                incident,
                ranks=list(incident.ranks),
                pids=list(incident.pids),
                hosts=list(incident.hosts),
                targets=list(incident.targets),
                evidence=dict(incident.evidence),
                diagnosis=dict(d) if d is not None else None,
                decision=dict(dec) if dec is not None else None,
            )
        )


@dataclass(frozen=True)
class Log:
    """One line of the sidecar's own log (``message % args``)."""

    level: int
    message: str
    args: tuple[object, ...] = ()

    @staticmethod
    def warning(message: str, *args: object) -> Log:
        return Log(logging.WARNING, message, args)

    @staticmethod
    def info(message: str, *args: object) -> Log:
        return Log(logging.INFO, message, args)


@dataclass(frozen=True)
class KillDecided:
    """This sidecar decided to kill these ranks (the health service's listeners)."""

    job_id: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class MarkKill:
    """The decision that kills a session, on the session (``Registry.mark_decided``)."""

    job_id: str
    rank: int
    rule: str
    incident_id: str
    evicted: bool


@dataclass(frozen=True)
class ResumeJob:
    """A paused job runs again: its clocks restart at ``at`` (``Registry.resume_job``)."""

    job_id: str
    at: float


@dataclass(frozen=True)
class ExecuteAction:
    """Run the incident's action (observe, dump, kill, restart, evict)."""

    incident: Incident


@dataclass(frozen=True)
class Sweep:
    """Kill ranks of an episode after its first action (``phase`` says why)."""

    episode_id: str
    job_id: str
    ranks: tuple[int, ...]
    action: str
    incident: Incident | None
    phase: str


@dataclass(frozen=True)
class Inspect:
    """Read these sessions' stacks, then feed a :class:`StacksRead` back."""

    incident: Incident
    episode: Episode
    workers: tuple[WorkerState, ...]
    #: Whether a stack read may send the hook's stack signal.
    signals: bool


@dataclass(frozen=True)
class Watch:
    """Run evidence round ``round`` of an episode after ``delay_s``, then feed
    an :class:`EvidenceRound` back (the plan comes from
    :func:`~trainprobe.sidecar.core.hang.machine.plan_round` when it is due)."""

    episode: Episode
    incident: Incident
    round: int
    delay_s: float
    #: Whether this episode's stack reads may send the hook's stack signal.
    signals: bool


@dataclass(frozen=True)
class Opened:
    """A tick opened this incident (what ``Engine.tick`` returns); applies nothing."""

    incident: Incident


Effect = (
    SetVerdict
    | Record
    | Publish
    | Log
    | KillDecided
    | MarkKill
    | ResumeJob
    | ExecuteAction
    | Sweep
    | Inspect
    | Watch
    | Opened
)


@dataclass(frozen=True)
class EvidenceRound:
    """One evidence round of a watched episode, as sampled."""

    episode: Episode
    incident: Incident
    round: int
    #: The sessions sampled, culprits first.
    states: tuple[WorkerState, ...]
    evidence: Mapping[int, RankEvidence]
    #: The latest stack record per rank, and how long the last read took.
    stacks: Mapping[int, dict[str, object]] = field(default_factory=dict)
    stacks_s: float = 0.0
    #: The kernel's word (one /proc read: state and freezer, no stacks) on the
    #: job's other live local ranks (``RoundPlan.others``): a pause is judged
    #: on every rank, not only on the sampled ones.
    kernel: Mapping[int, RankEvidence] = field(default_factory=dict)


@dataclass(frozen=True)
class StacksRead:
    """The stacks an :class:`Inspect` read (an error record where one failed)."""

    incident: Incident
    episode: Episode
    records: tuple[tuple[int, dict[str, object]], ...]
    seconds: float


Evidence = EvidenceRound | StacksRead


def signals_for(config: HangConfig, incident: Incident) -> bool:
    """Whether stack reads of this hang may send the stack signal: only where its
    action could act (a dry run or an observe verdict signals nothing at all)."""
    policy = config.policy
    return not policy.dry_run and is_destructive(policy.for_verdict(incident.verdict))


def kill_decided(
    config: HangConfig, job_id: str, ranks: Sequence[int], action: str
) -> list[Effect]:
    """The health service hears of a kill decision; a dry run decides nothing."""
    if config.policy.dry_run or not is_destructive(action):
        return []
    return [KillDecided(job_id, tuple(ranks))]
