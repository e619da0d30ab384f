"""A replicated job (torchft) seen as replica groups: who waits, who is the culprit.

With torchft, replica groups train in lockstep and a step commits only in the
current quorum. When one replica's training thread hangs, the others soon
wait for it, in torchft's quorum or in the replicated gradient allreduce, and
every rank of the job stops stepping. Their hooks say so
(:class:`~trainprobe.sidecar.core.judge.culprit.RankSummary` ``replica`` and
``ft_wait``, from ``hook.watch_torchft``). This module turns that into the
diagnosis the episode acts on:

- a replica whose every live rank waits inside torchft (or in a collective) is
  **waiting**: its ranks are never culprits and never targets, whatever a
  stall rule or a stack says;
- a replica with a rank that is neither waiting nor inside a declared phase,
  or that stopped reporting, while another replica waits, is the **culprit
  replica**: its action is to evict the whole group (its ranks share one
  model replica, and torchft replaces groups, not ranks).

Only what the kernel vouches for forms a replica: a session whose pid no one
verified (TCP, no identity ticket) names no replica and waits for no one,
whatever its Hello and reports say. And whatever a rank reports, one that
stepped within its normal step time (:func:`stepping`) holds no one up: it is
never a culprit, and a replica with such a rank is no culprit replica.
:func:`apply_replicas` is the last word on a job's culprits, replicated or not.

Pure: summaries and a :class:`~trainprobe.sidecar.core.judge.culprit.Diagnosis` in,
a Diagnosis out. The replicas found are in ``evidence["replicas"]``
(:func:`replica_evidence` reads it back).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from trainprobe.sidecar.core.judge.culprit import STRAGGLER, UNRESPONSIVE, Diagnosis, RankSummary

__all__ = [
    "ReplicaEvidence",
    "apply_replicas",
    "culprit_onset",
    "replica_evidence",
    "replica_groups",
    "stepping",
    "waits_for_peers",
]


@dataclass(frozen=True)
class ReplicaEvidence:
    """What a diagnosis says about a replicated job's groups."""

    #: replica id -> its ranks (every rank the job reported, live or not).
    groups: dict[str, tuple[int, ...]]
    culprits: tuple[str, ...]
    waiting: tuple[str, ...]

    @property
    def waiting_ranks(self) -> frozenset[int]:
        return frozenset(r for rep in self.waiting for r in self.groups.get(rep, ()))

    def ranks_of(self, replicas: Sequence[str]) -> list[int]:
        return sorted(r for rep in replicas for r in self.groups.get(rep, ()))

    @property
    def survivors(self) -> int:
        """Replicas that go on once the culprit replicas are evicted."""
        return len(self.groups) - len(self.culprits)

    def to_record(self) -> dict[str, object]:
        return {
            "groups": {k: list(v) for k, v in sorted(self.groups.items())},
            "culprits": list(self.culprits),
            "waiting": list(self.waiting),
        }


def replica_groups(ranks: Sequence[RankSummary]) -> dict[str, tuple[int, ...]]:
    """Replica id -> ranks, for verified ranks whose hook named a replica."""
    out: dict[str, list[int]] = {}
    for r in ranks:
        if r.replica and r.verified:
            out.setdefault(r.replica, []).append(r.rank)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def waits_for_peers(r: RankSummary) -> bool:
    """A live, reporting, verified rank blocked inside torchft or in a collective."""
    return r.verified and r.reporting and not r.ended and (bool(r.ft_wait) or r.in_flight)


def stepping(r: RankSummary) -> bool:
    """Reporting, and its last step is no older than its normal step time."""
    return (
        r.reporting
        and not r.ended
        and r.has_step
        and r.normal_step_s > 0.0
        and r.step_age_s <= r.normal_step_s
    )


def _stalled(r: RankSummary) -> bool:
    """Not waiting for peers, not in a declared phase, not stepping: it holds the others up."""
    if r.ended == "goodbye":
        return False
    if not r.reporting or r.ended:
        return True
    return not waits_for_peers(r) and not r.phases and not stepping(r)


def _where(r: RankSummary) -> str:
    on = f" on {r.host}" if r.host else ""
    if not r.reporting or r.ended:
        return f"rank {r.rank}{on} (pid {r.pid}) sent no report for {r.report_age_s:.1f}s"
    step = f", last step {r.step} {r.step_age_s:.1f}s ago" if r.has_step else ""
    return f"rank {r.rank}{on} is not inside torchft{step}"


def apply_replicas(
    ranks: Sequence[RankSummary], diag: Diagnosis, dead: Collection[int] = ()
) -> Diagnosis:
    """``diag`` for a replicated job: the culprit replica named, waiting replicas
    spared; for any job, no rank that steps normally named.

    ``dead``: ranks the kernel shows stopped, zombie or gone. Their last report
    may say they wait inside torchft (stopped there) or stepped a moment ago,
    but they never will again: they count as stalled. A job with fewer than
    two replicas named keeps its analysis, less the ranks that step.
    """
    if dead:
        ranks = [replace(r, reporting=False) if r.rank in dead else r for r in ranks]
    return _spare_stepping(ranks, _replicas(ranks, diag))


def _spare_stepping(ranks: Sequence[RankSummary], diag: Diagnosis) -> Diagnosis:
    """``diag`` without the culprits that step normally (the same object if none)."""
    named = set(diag.culprits)  # a tuple: thousands of silent culprits made this quadratic
    fine = sorted(r.rank for r in ranks if r.rank in named and stepping(r))
    if not fine:
        return diag
    note = f"rank(s) {fine} step normally (last step within their step time): no culprit"
    return replace(
        diag,
        culprits=tuple(c for c in diag.culprits if c not in fine),
        summary=f"{diag.summary}; {note}" if diag.summary else note,
        evidence={**diag.evidence, "stepping": fine},
    )


def _replicas(ranks: Sequence[RankSummary], diag: Diagnosis) -> Diagnosis:
    groups = replica_groups(ranks)
    if len(groups) < 2:
        return diag
    by_rank = {r.rank: r for r in ranks}
    live = {
        rep: [by_rank[x] for x in rs if by_rank[x].ended != "goodbye"] for rep, rs in groups.items()
    }
    waiting = sorted(rep for rep, rs in live.items() if rs and all(waits_for_peers(r) for r in rs))
    spared = {x for rep in waiting for x in groups[rep]}
    culprit_reps: list[str] = []
    if waiting:
        # A replica any of whose ranks steps is not stuck, whatever its others say.
        culprit_reps = sorted(
            rep
            for rep, rs in live.items()
            if rep not in waiting
            and any(_stalled(r) for r in rs)
            and not any(stepping(r) for r in rs)
        )
    ev = ReplicaEvidence(groups, tuple(culprit_reps), tuple(waiting))
    evidence = {**diag.evidence, "replicas": ev.to_record()}
    if culprit_reps:
        stuck = sorted(
            (r for rep in culprit_reps for r in live[rep] if _stalled(r)), key=lambda r: r.rank
        )
        silent = any(not r.reporting or r.ended for r in stuck)
        waits = sorted({by_rank[x].ft_wait or "a collective" for x in spared})
        summary = (
            "; ".join(
                f"replica {rep}: " + ", ".join(_where(r) for r in stuck if r.rank in groups[rep])
                for rep in culprit_reps
            )
            + f"; replicas {waiting} wait for it in torchft's {' / '.join(waits)}"
        )
        return replace(
            diag,
            kind=UNRESPONSIVE if silent else STRAGGLER,
            culprits=tuple(r.rank for r in stuck),
            waiting=tuple(sorted(spared)),
            confidence=max(diag.confidence, 0.9),
            summary=summary,
            evidence=evidence,
        )
    # No replica stands out (all wait: the lighthouse or the network; or none
    # waits yet): keep the analysis, but a waiting replica is never a culprit.
    culprits = tuple(r for r in diag.culprits if r not in spared)
    return replace(
        diag,
        culprits=culprits,
        waiting=tuple(sorted(set(diag.waiting) | spared)),
        evidence=evidence,
    )


def culprit_onset(
    ranks: Sequence[RankSummary], diag: Diagnosis, onset_at: float, now: float
) -> float:
    """When the culprits named now stopped: the latest of their last steps, never
    before the episode's ``onset_at``. The patience counts from here, so a stall
    that begins while an episode is open (one an unverified client's frozen step
    opened, say) gets its own patience, not what is left of the episode's."""
    named = set(diag.culprits)
    return max([onset_at, *(now - r.step_age_s for r in ranks if r.rank in named and r.has_step)])


def replica_evidence(evidence: Mapping[str, object] | None) -> ReplicaEvidence | None:
    """The :class:`ReplicaEvidence` a diagnosis (or its record) carries, if any."""
    rec = (evidence or {}).get("replicas")
    if not isinstance(rec, Mapping):
        return None
    raw = rec.get("groups")
    if not isinstance(raw, Mapping):
        return None
    groups = {str(k): tuple(int(x) for x in v) for k, v in raw.items()}
    return ReplicaEvidence(
        groups,
        _strs(rec.get("culprits")),
        _strs(rec.get("waiting")),
    )


def _strs(v: object) -> tuple[str, ...]:
    return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) else ()
