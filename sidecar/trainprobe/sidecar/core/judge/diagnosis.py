"""What a culprit analysis takes and gives: each rank's summary, and the diagnosis.

:class:`RankSummary` is the compact state of one rank that the analysis
reads, and what sidecars exchange about their ranks (through a job's
coordinator, under Ray), so it holds plain values only: what the
rank reported, and whether the kernel vouched for it (an unverified
session's claims count against no one). :class:`Diagnosis` is what
:func:`~trainprobe.sidecar.core.judge.culprit.analyze` concludes: a kind, the
culprits, the ranks seen waiting (never culprits), a confidence, and the
one-paragraph text an incident and ``trainprobe diagnose`` show.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.text import sentences

__all__ = [
    "ALL_IN_FLIGHT",
    "HEALTHY",
    "INCONCLUSIVE",
    "MISMATCH",
    "STRAGGLER",
    "UNRESPONSIVE",
    "Diagnosis",
    "GroupProgress",
    "RankSummary",
]

#: Diagnosis kinds.
UNRESPONSIVE = "unresponsive"
STRAGGLER = "straggler"
MISMATCH = "mismatch"
ALL_IN_FLIGHT = "all_in_flight"
INCONCLUSIVE = "inconclusive"
HEALTHY = "healthy"


@dataclass(frozen=True)
class GroupProgress:
    """One rank's collectives in one process group."""

    group: str
    issued: int
    completed: int
    #: Seconds the oldest in-flight collective has waited; None when idle.
    inflight_age_s: float | None = None
    inflight_op: str = ""
    inflight_seq: int = 0


@dataclass(frozen=True)
class RankSummary:
    """The compact, shareable state of one rank (what sidecars exchange)."""

    rank: int
    world_size: int
    host: str = ""
    pid: int = 0
    #: Ray node id, when the rank runs under Ray (hosts can repeat there).
    node: str = ""
    #: True while reports arrive within the heartbeat limit.
    reporting: bool = True
    #: "", "goodbye", "vanished" or "rejected".
    ended: str = ""
    report_age_s: float = 0.0
    has_step: bool = False
    step: int = 0
    step_age_s: float = 0.0
    phases: tuple[str, ...] = ()
    groups: tuple[GroupProgress, ...] = ()
    verdict: str = "OK"
    #: The replica group (torchft) the rank trains in; "" when not replicated.
    replica: str = ""
    #: What it waits for inside torchft ("quorum", "allreduce", "commit"), or "".
    ft_wait: str = ""
    ft_wait_age_s: float = 0.0
    #: Whether the kernel vouched for its pid (an identity ticket, here or on the
    #: relay node that verified it). An unverified session's claims about other
    #: ranks (replica groups, torchft waits, arrivals) count against no one.
    verified: bool = False
    #: How long a step of it normally takes, as the sidecar sees steps (its p99
    #: step time, twice, plus the interval its reports come at); 0 when unknown.
    normal_step_s: float = 0.0
    #: The kernel's word on a silent rank, as the sidecar that serves it read
    #: it after its last report: "running", "stopped", "traced" or "frozen";
    #: "" when unread. Another node's sidecar judges a pause on it.
    kernel: str = ""
    #: How long ago that read was (aged in transit, as every age).
    kernel_age_s: float = 0.0

    def group(self, name: str) -> GroupProgress | None:
        return next((g for g in self.groups if g.group == name), None)

    @property
    def in_flight(self) -> bool:
        return any(g.inflight_age_s is not None for g in self.groups)


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`analyze` concluded about one job.

    ``culprits`` are the ranks the others wait for; ``waiting`` the ranks
    seen waiting in a collective (never culprits). ``where`` maps a culprit to
    the place its stack shows it stuck at, once stacks were captured.
    """

    kind: str
    culprits: tuple[int, ...] = ()
    waiting: tuple[int, ...] = ()
    confidence: float = 0.0
    summary: str = ""
    evidence: dict[str, object] = field(default_factory=dict)
    where: dict[int, str] = field(default_factory=dict)

    @property
    def conclusive(self) -> bool:
        return bool(self.culprits) and self.kind not in (INCONCLUSIVE, HEALTHY)

    @property
    def text(self) -> str:
        """The one-paragraph explanation an incident and ``trainprobe diagnose`` show."""
        places = [f"rank {rank} is stuck at {place}" for rank, place in sorted(self.where.items())]
        return "; ".join(p for p in (self.summary, sentences(places)) if p)

    def with_where(self, where: dict[int, str]) -> Diagnosis:
        """The same diagnosis, with the places the culprits are stuck at."""
        return replace(self, where={**self.where, **where})

    def to_record(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "culprits": list(self.culprits),
            "waiting": list(self.waiting),
            "confidence": round(self.confidence, 2),
            "conclusive": self.conclusive,
            "summary": self.summary,
            "text": self.text,
            "where": {str(k): v for k, v in sorted(self.where.items())},
            "evidence": self.evidence,
        }
