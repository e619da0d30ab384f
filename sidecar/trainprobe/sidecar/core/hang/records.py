"""The incident log's records of a hang, typed: one class per record shape.

The hang machine (:mod:`.machine`) returns these inside
:class:`~trainprobe.sidecar.core.hang.effects.Record` effects; the engine's runner
writes ``to_record()`` to the log. An incident itself is
:meth:`Incident.to_record <trainprobe.sidecar.core.incident.incidents.Incident.to_record>`,
an action's outcome :func:`~trainprobe.sidecar.core.incident.actions.action_record`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.judge.decision import Judgement

__all__ = [
    "ActDecision",
    "IncidentUpdate",
    "LogRecord",
    "PauseDecision",
    "PauseEnded",
    "StallEnded",
]


@dataclass(frozen=True)
class IncidentUpdate:
    """An incident folded into a job's open episode (``incident_update``)."""

    episode_id: str
    incident: Incident
    #: A rank of a hung job that exits: what the episode's action leads to.
    expected: bool

    def to_record(self) -> dict[str, object]:
        inc = self.incident
        return {
            "type": "incident_update",
            "incident_id": self.episode_id,
            "time": inc.time,
            "job_id": inc.job_id,
            **inc.finding(),
            "expected": self.expected,
            "evidence": inc.evidence,
        }


@dataclass(frozen=True)
class ActDecision:
    """The watch decided to act (a ``decision`` record with ``act`` true)."""

    incident: Incident
    judgement: Judgement
    #: When the episode's stall began, and when the decision was taken.
    onset_at: float
    now: float

    def to_record(self) -> dict[str, object]:
        inc = self.incident
        return {
            "type": "decision",
            "incident_id": inc.id,
            "job_id": inc.job_id,
            "targets": inc.targets,
            "action": str(inc.action),
            # What the policy made of the decision (dry run, kill budget, no target here).
            "action_reason": inc.action_reason,
            "detected_after_s": round(inc.detected_at - self.onset_at, 3),
            "decided_after_s": round(self.now - self.onset_at, 3),
            **self.judgement.to_record(),
        }


@dataclass(frozen=True)
class StallEnded:
    """A watched stall ended by itself: nothing was killed (rule ``resumed``)."""

    episode_id: str
    job_id: str
    stalled_s: float
    where: str
    activity: str
    patience_s: float

    def to_record(self) -> dict[str, object]:
        why = f"the stall ended by itself after {self.stalled_s:.1f}s: nothing was killed"
        return _no_kill(
            self.episode_id,
            self.job_id,
            "resumed",
            why,
            stalled_s=round(self.stalled_s, 3),
            where=self.where,
            activity=self.activity,
            patience_s=self.patience_s,
        )


@dataclass(frozen=True)
class PauseDecision:
    """A job found paused (every live rank held): no kill (rule ``paused``)."""

    incident_id: str
    job_id: str
    why: str
    evidence: dict[str, object] = field(default_factory=dict)

    def to_record(self) -> dict[str, object]:
        return _no_kill(self.incident_id, self.job_id, "paused", self.why, evidence=self.evidence)


@dataclass(frozen=True)
class PauseEnded:
    """A paused job's episode closed: it resumed, nothing was killed."""

    episode_id: str
    job_id: str
    paused_s: float

    def to_record(self) -> dict[str, object]:
        why = (
            "the job was paused (every live rank held) and resumed: nothing was killed; "
            "its clocks restart at the resume"
        )
        return _no_kill(
            self.episode_id, self.job_id, "resumed", why, paused_s=round(self.paused_s, 3)
        )


def _no_kill(
    incident_id: str, job_id: str, rule: str, why: str, **more: object
) -> dict[str, object]:
    """A ``decision`` record that decided against a kill, ``more`` after its reason."""
    return {
        "type": "decision",
        "incident_id": incident_id,
        "job_id": job_id,
        "act": False,
        "rule": rule,
        "why": why,
        **more,
    }


#: Every record the hang machine writes.
LogRecord = IncidentUpdate | ActDecision | StallEnded | PauseDecision | PauseEnded
