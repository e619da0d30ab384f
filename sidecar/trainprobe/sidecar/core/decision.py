"""Kill now, or wait: a suspect job's culprits and evidence against the patience.

Detection and action run on two clocks. The verdict, the culprit and where
it is stuck come within seconds (the rules, :func:`refine`); the kill comes

- **at once on definitive evidence**: a culprit the kernel shows stopped,
  zombie or gone, or ranks waiting on different collectives of one group
  (they can never match);
- **otherwise after the patience** (:mod:`~trainprobe.sidecar.core.patience`):
  a rank that sleeps, reads, waits on a lock or computes may resume.

Pure: plain data in (the diagnosis, :class:`~trainprobe.sidecar.core.evidence.RankEvidence`
per rank, times on the sidecar's clock), a :class:`Judgement` out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.culprit import (
    ALL_IN_FLIGHT,
    MISMATCH,
    STRAGGLER,
    UNRESPONSIVE,
    Diagnosis,
    RankSummary,
)
from trainprobe.sidecar.core.evidence import RankEvidence, definitive_reason
from trainprobe.sidecar.core.held import held_kind
from trainprobe.sidecar.core.text import sentences, short_list

__all__ = [
    "ORPHANING_RULES",
    "Judgement",
    "judge",
    "paused_line",
    "paused_reason",
    "refine",
    "suspect_line",
]

#: What each definitive reason means, for the incident.
_DEFINITIVE_WHY = {
    "stopped": "its process is stopped (SIGSTOP, /proc state T): nothing in it runs until "
    "someone resumes it, and its peers wait for it",
    "zombie": "its process exited (a zombie not yet reaped): it can never join its peers' "
    "collective",
    "gone": "its process no longer exists: its peers can never complete a collective with it",
}


#: Definitive rules whose culprit is already over: killing it does nothing, and
#: its peers wait on a collective that can never complete, so the job's other
#: ranks are ended at once (no ``job_kill_grace_s``) and the job can restart.
ORPHANING_RULES = frozenset({"zombie", "gone"})


def refine(diag: Diagnosis, evidence: Mapping[int, RankEvidence]) -> Diagnosis:
    """The diagnosis corrected by what the sidecar saw itself.

    1. A rank the kernel shows stopped, zombie or gone is the culprit, whatever
       its last report said (a stopped rank's old report looks like a rank
       sitting at an old collective).
    2. A conclusive analysis of fresh collective data stands.
    3. Otherwise (no ``watch_ddp``, or everyone in flight) the stacks decide:
       ranks blocked in a collective are waiting; those elsewhere are the culprits.
    """
    dead = sorted(r for r, ev in evidence.items() if definitive_reason(ev))
    if dead and len(dead) < max(len(evidence), 2):
        parts = [f"rank {r}: {_DEFINITIVE_WHY[definitive_reason(evidence[r])]}" for r in dead]
        waiting = tuple(sorted(r for r, ev in evidence.items() if ev.waiting))
        return replace(
            diag,
            kind=UNRESPONSIVE,
            culprits=tuple(dead),
            waiting=waiting or diag.waiting,
            confidence=0.99,
            summary=sentences(parts),
            evidence={**diag.evidence, "decided_by": "proc"},
        )
    if diag.conclusive and diag.kind != ALL_IN_FLIGHT:
        return diag
    seen = {r: ev for r, ev in evidence.items() if ev.activity}
    blocked = sorted(r for r, ev in seen.items() if ev.waiting)
    elsewhere = sorted(r for r, ev in seen.items() if not ev.waiting)
    if not blocked or not elsewhere:
        return diag
    parts = [
        f"rank {r} is not in a collective ({seen[r].label} at {seen[r].where or '?'})"
        for r in elsewhere
    ]
    return replace(
        diag,
        kind=STRAGGLER,
        culprits=tuple(elsewhere),
        waiting=tuple(blocked),
        confidence=0.9 if len(elsewhere) == 1 else 0.7,
        summary=sentences(parts)
        + f"; ranks {short_list(blocked)} wait in a collective (by their stacks)",
        evidence={**diag.evidence, "decided_by": "stacks", "was": diag.kind},
    )


@dataclass(frozen=True)
class Judgement:
    """Whether to act now, and why (the incident's ``decision``)."""

    act: bool
    #: "stopped", "zombie", "gone", "mismatch", "patience", or "" while waiting.
    rule: str
    why: str
    definitive: bool
    patience_s: float
    patience_basis: str
    onset_at: float
    decided_at: float
    evidence: dict[str, object] = field(default_factory=dict)

    @property
    def kill_at(self) -> float:
        return self.onset_at + self.patience_s

    def to_record(self) -> dict[str, object]:
        return {
            "act": self.act,
            "rule": self.rule,
            "definitive": self.definitive,
            "why": self.why,
            "patience_s": round(self.patience_s, 3),
            "patience_basis": self.patience_basis,
            "stalled_s": round(self.decided_at - self.onset_at, 3),
            "evidence": self.evidence,
        }


def judge(
    diag: Diagnosis,
    evidence: Mapping[int, RankEvidence],
    onset_at: float,
    patience_s: float,
    patience_basis: str,
    now: float,
) -> Judgement:
    """Kill now (definitive evidence or patience spent) or keep watching."""
    record = {str(r): ev.to_record() for r, ev in sorted(evidence.items())}
    common = dict(
        patience_s=patience_s,
        patience_basis=patience_basis,
        onset_at=onset_at,
        decided_at=now,
        evidence=record,
    )
    for rank in diag.culprits:
        ev = evidence.get(rank)
        reason = definitive_reason(ev) if ev is not None else ""
        if reason:
            why = f"definitive: rank {rank}: {_DEFINITIVE_WHY[reason]}"
            return Judgement(True, reason, why, True, **common)  # type: ignore[arg-type]
    if diag.kind == MISMATCH and diag.culprits:
        why = (
            f"definitive: rank(s) {list(diag.culprits)} wait on another collective than their "
            "peers in the same group: the collectives can never match"
        )
        return Judgement(True, "mismatch", why, True, **common)  # type: ignore[arg-type]
    if diag.kind == MISMATCH and diag.evidence.get("same_seq"):
        # A tie (2 ranks, or an even split): no majority says who is wrong, but
        # the job can never go on. Its ranks are ended together (on_inconclusive).
        why = (
            f"definitive: ranks {list(diag.waiting)} issued the same collective of one group "
            "as different operations: they can never match, and no majority names one rank, "
            "so the ranks in it are ended together"
        )
        return Judgement(True, "mismatch", why, True, **common)  # type: ignore[arg-type]
    stalled = now - onset_at
    seen = "; ".join(
        f"rank {r} {evidence[r].label} at {evidence[r].where or '?'}"
        for r in diag.culprits
        if r in evidence
    )
    named = f"culprits {list(diag.culprits)} ({diag.kind})" if diag.culprits else ""
    ambiguous = f"ambiguous evidence ({seen or named or 'no culprit named: ' + diag.kind})"
    if stalled >= patience_s:
        why = (
            f"patience: stalled {stalled:.1f}s >= {patience_s:.0f}s ({patience_basis}); {ambiguous}"
        )
        return Judgement(True, "patience", why, False, **common)  # type: ignore[arg-type]
    why = (
        f"{ambiguous}: watching; kill {patience_s - stalled:.0f}s from now "
        f"({patience_s:.0f}s after onset, {patience_basis}) unless the job resumes"
    )
    return Judgement(False, "", why, False, **common)  # type: ignore[arg-type]


def suspect_line(
    diag: Diagnosis, evidence: Mapping[int, RankEvidence], j: Judgement, now: float
) -> str:
    """``HUNG? 12 s of 90 s patience — rank 1 at loader.py:88 (reading)``."""
    ranks = diag.culprits
    if ranks:
        first = ranks[0]
        ev = evidence.get(first)
        where = diag.where.get(first) or (ev.where if ev is not None else "")
        what = f" ({ev.label})" if ev is not None else ""
        who = f"rank {first}" + (f" at {where}" if where else "") + what
        if len(ranks) > 1:
            who += f" (+{len(ranks) - 1} more)"
    else:
        who = f"no culprit named ({diag.kind})"
    return f"HUNG? {now - j.onset_at:.0f} s of {j.patience_s:.0f} s patience — {who}"


def paused_reason(evidence: Mapping[int, RankEvidence], summaries: Sequence[RankSummary]) -> str:
    """Why the job is paused, not hung ("" when it is not).

    A scheduler's suspend (Slurm's ``scontrol suspend``), an operator's
    ``kill -STOP`` of every rank, or a cgroup freezer holds *every* rank at
    once: nobody waits for anybody, and the job goes on when it is resumed.
    Paused means: at least one rank the kernel shows held (stopped, stopped by
    a tracer, or frozen: :attr:`RankEvidence.held`; for a relayed rank, the
    kernel of its node, as that node said: :mod:`~trainprobe.sidecar.core.held`),
    no live rank sampled shown running, and no other live rank of the job reporting (a held
    process's reporter thread is held too, so a rank that reports runs).

    A held rank whose peers run and wait for it is no pause: that is a hang,
    and the stopped rank its definitive culprit (:func:`definitive_reason`).
    Ranks that are over (zombie, gone, ended streams) do not count either way.
    """
    held: list[int] = []
    for rank, ev in sorted(evidence.items()):
        if ev.state in ("zombie", "gone", "exiting"):
            continue
        if ev.held:
            held.append(rank)
        elif ev.state:
            return ""  # a live rank the kernel shows running, sleeping or in I/O
    if not held:
        return ""
    if any(s.reporting and not s.ended and s.rank not in held for s in summaries):
        return ""
    how = sorted({_HELD_HOW[held_kind(evidence[r])] for r in held})
    return f"every live rank is held ({', '.join(how)}: ranks {held}): the job is paused, not hung"


_HELD_HOW = {
    "frozen": "frozen by a cgroup freezer",
    "stopped": "stopped by SIGSTOP",
    "traced": "stopped by a tracer",
}


def paused_line(reason: str, paused_s: float) -> str:
    """``PAUSED 12 s — every live rank is held (...)`` for ``trainprobe status``."""
    return f"PAUSED {paused_s:.0f} s — {reason}; nothing is killed until it resumes"
