"""Kill now, or wait: a suspect job's culprits and evidence against the patience.

Detection and action run on two clocks. The verdict, the culprit and where
it is stuck come within seconds (the rules, :func:`refine`); the kill comes

- **at once on definitive evidence**: a culprit the kernel shows stopped,
  zombie or gone, or ranks waiting on different collectives of one group
  (they can never match);
- **otherwise after the patience** (:mod:`~trainprobe.sidecar.core.hang.patience`):
  a rank that sleeps, reads, waits on a lock or computes may resume.

Pure: plain data in (the diagnosis, :class:`~trainprobe.sidecar.core.judge.evidence.RankEvidence`
per rank, times on the sidecar's clock), a :class:`Judgement` out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.judge.culprit import (
    ALL_IN_FLIGHT,
    MISMATCH,
    STRAGGLER,
    UNRESPONSIVE,
    Diagnosis,
    RankSummary,
)
from trainprobe.sidecar.core.judge.evidence import RankEvidence, definitive_reason
from trainprobe.sidecar.core.text import sentences, short_list

__all__ = [
    "ORPHANING_RULES",
    "Judgement",
    "judge",
    "refine",
    "stuck_sweep_s",
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


def refine(
    diag: Diagnosis, evidence: Mapping[int, RankEvidence], awaiting: Collection[int] = ()
) -> Diagnosis:
    """The diagnosis corrected by what the sidecar saw itself.

    1. A rank the kernel shows stopped, zombie or gone is the culprit, whatever
       its last report said (a stopped rank's old report looks like a rank
       sitting at an old collective). A silent rank beside it that is neither
       held nor seen waiting in a collective (and whose node's word is not
       still on its way, ``awaiting``) is stuck on its own: a stopped rank
       explains peers that wait for it, not that. Such ranks are listed as
       ``stuck`` (:func:`stuck_sweep_s`): swept once their patience is spent,
       as they would be killed without the stopped rank (or after
       ``job_kill_grace_s`` if that comes first, as the job's sweep would),
       so a stopped rank, made up by a token holder's own Relay stream or
       real, never makes a real hang wait longer than without it.
    2. A conclusive analysis of fresh collective data stands.
    3. Otherwise (no ``watch_ddp``, or everyone in flight) the stacks decide:
       ranks blocked in a collective are waiting; those elsewhere are the culprits.
    """
    dead = sorted(r for r, ev in evidence.items() if definitive_reason(ev))
    if dead and len(dead) < max(len(evidence), 2):
        parts = [f"rank {r}: {_DEFINITIVE_WHY[definitive_reason(evidence[r])]}" for r in dead]
        stuck = [r for r, ev in sorted(evidence.items()) if r not in awaiting and _stuck(ev)]
        if stuck:
            parts.append(
                f"rank(s) {short_list(stuck)}: silent, neither held nor waiting in a collective: "
                "stuck on their own"
            )
        waiting = tuple(sorted(r for r, ev in evidence.items() if ev.waiting))
        return replace(
            diag,
            kind=UNRESPONSIVE,
            culprits=tuple(dead),
            waiting=waiting or diag.waiting,
            confidence=0.99,
            summary=sentences(parts),
            evidence={**diag.evidence, "decided_by": "proc", **({"stuck": stuck} if stuck else {})},
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


def stuck_sweep_s(
    diag: Diagnosis, j: Judgement, ranks: Sequence[RankSummary], now: float
) -> float | None:
    """Seconds from ``now`` until the ranks stuck on their own beside a stopped
    culprit (:func:`refine`'s ``stuck``) are swept: when their patience is spent,
    counted from when they went silent (never before the episode's onset), as
    it would be without the stopped rank. None when there are none."""
    stuck = diag.evidence.get("stuck")
    if j.rule != "stopped" or not stuck:
        return None
    silent = [now - r.report_age_s for r in ranks if r.rank in stuck]  # type: ignore[operator]
    onset = max(j.onset_at, min(silent, default=j.onset_at))
    return max(0.0, onset + j.patience_s - now)


def _stuck(ev: RankEvidence) -> bool:
    """Silent, alive, not held and not seen waiting: a rank stuck on its own."""
    return (
        not ev.reporter_alive
        and not ev.held
        and not ev.waiting
        and not definitive_reason(ev)
        and ev.state != "exiting"
        and not ev.superseded
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
