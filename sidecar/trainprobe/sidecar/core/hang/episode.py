"""One hang episode: what it records of a job's hang, and the policy it runs under.

An :class:`Episode` is plain data that lives from the first HUNG or
UNRESPONSIVE incident of a job until every process it involved is gone,
replaced or progressing again (:class:`~trainprobe.sidecar.core.hang.episodes.JobEpisodes`
opens, routes, sweeps and settles them). It holds what the hang machine
needs to continue across ticks: the diagnosis, the action and its sweep,
where the culprits are stuck, the patience's onset, whether it follows a
coordinator's episode, and when the job was seen paused and resumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainprobe.sidecar.core.incident.actions import Action
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.judge.culprit import Diagnosis
from trainprobe.sidecar.core.session.model import Verdict

if TYPE_CHECKING:
    from trainprobe.sidecar.core.hang.records import IncidentUpdate

__all__ = ["HANG_VERDICTS", "INCONCLUSIVE_CHOICES", "CulpritPolicy", "Episode", "Routing"]

HANG_VERDICTS = frozenset({Verdict.HUNG, Verdict.UNRESPONSIVE})
#: ``on_inconclusive`` values.
INCONCLUSIVE_CHOICES = ("kill_stalled", "observe")


@dataclass(frozen=True)
class CulpritPolicy:
    """What to do with a job's hang beyond the per-verdict action."""

    #: Without a named culprit: ``kill_stalled`` (every stalled rank) or ``observe``.
    on_inconclusive: str = "kill_stalled"
    #: After a destructive action, ranks of the job still alive this long later are killed.
    job_kill_grace_s: float = 10.0


@dataclass
class Episode:
    """One job's hang, from its first incident here until its processes are gone."""

    id: str
    job_id: str
    opened_at: float
    #: rank -> pid of every rank of the job this sidecar served when it opened.
    pids: dict[int, int]
    diagnosis: Diagnosis
    #: The incident that opened it (a follower's may have no local incident).
    incident: Incident | None = None
    #: The policy's action for the verdict; a destructive one sweeps the job after the grace.
    action: str = Action.OBSERVE
    sweep_at: float | None = None
    swept: bool = False
    #: Why the sweep runs: ``job_kill_grace``, or ``peers_of_gone`` (at once).
    sweep_phase: str = "job_kill_grace"
    #: The coordinator's episode this follows ("" when opened here).
    remote_id: str = ""
    updates: int = 0
    #: Where culprits are stuck (rank -> place), once their stacks were read.
    where: dict[int, str] = field(default_factory=dict)
    #: When the stall began (the incident's onset): the patience counts from here.
    onset_at: float = 0.0
    #: Set once its incident was published, and once the decision to act was taken.
    published: bool = False
    acted: bool = False
    #: The latest judgement and one-line state while watched (``trainprobe status``).
    decision: dict[str, object] = field(default_factory=dict)
    suspect: str = ""
    #: What the culprit was doing, for the patience history when the stall ends by itself.
    activity: str = ""
    #: When the job was first seen paused (every live rank held: stopped or
    #: frozen) and when it was seen resumed; a resumed episode closes, and the
    #: job's clocks restart at the resume (Registry.resume_job).
    paused_at: float | None = None
    resumed_at: float | None = None
    #: Updates folded in before its incident was published: written right after
    #: it, so that the log reads each update after the incident it updates.
    held_updates: list[IncidentUpdate] = field(default_factory=list)

    @property
    def leader(self) -> bool:
        return not self.remote_id


@dataclass
class Routing:
    """A tick's incidents sorted out: which open an episode, which update one."""

    openers: list[Incident] = field(default_factory=list)
    #: (episode id, incident, expected) for incidents folded into an episode.
    updates: list[tuple[str, Incident, bool]] = field(default_factory=list)
    #: Incidents outside any hang episode (DEGRADED, a DEAD rank of a healthy job).
    plain: list[Incident] = field(default_factory=list)
