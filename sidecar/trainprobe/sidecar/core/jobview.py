"""A job seen whole: this sidecar's ranks plus the summaries other sidecars share.

Per-node sidecars each see their own node's ranks. Through a job-level
coordinator (on Ray: a detached actor per job) they exchange compact
:class:`~trainprobe.sidecar.core.culprit.RankSummary` objects, so every
sidecar can run the same analysis over the whole job. This module is the pure
part of that exchange:

- :class:`CoordinatorState`: what the coordinator keeps and answers;
- :class:`JobView`: what one sidecar keeps of the others' answers;
- :func:`aged`: a summary made older by the time it spent in transit, so no
  two hosts need agreeing clocks (every age is measured on one clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.culprit import HEALTHY, Diagnosis, RankSummary, analyze
from trainprobe.sidecar.core.replicas import apply_replicas

__all__ = [
    "CoordinatorState",
    "EpisodeNote",
    "JobView",
    "SyncReply",
    "aged",
    "analyze_job",
    "merge_summaries",
]

#: Verdicts that make a job worth diagnosing.
_TROUBLE = frozenset({"HUNG", "UNRESPONSIVE"})


@dataclass(frozen=True)
class EpisodeNote:
    """A job's open hang episode, as the sidecar that opened it announces it."""

    id: str
    job_id: str
    opened_by: str
    verdict: str
    rule: str
    kind: str = ""
    culprits: tuple[int, ...] = ()
    text: str = ""
    #: Where culprits are stuck, as their own sidecars found out (rank -> place).
    where: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncReply:
    """The coordinator's answer to one sidecar: everyone else's ranks, and the episode."""

    #: (summary, seconds since the coordinator received it) of other sidecars' ranks.
    others: tuple[tuple[RankSummary, float], ...] = ()
    episode: EpisodeNote | None = None


def aged(s: RankSummary, dt_s: float, heartbeat_limit_s: float) -> RankSummary:
    """``s`` as it stands ``dt_s`` seconds after it was taken.

    Every age grows by ``dt_s``; a rank not heard of for longer than the
    heartbeat limit no longer counts as reporting (its sidecar may be gone).
    """
    if dt_s <= 0:
        return s
    groups = tuple(
        g if g.inflight_age_s is None else replace(g, inflight_age_s=g.inflight_age_s + dt_s)
        for g in s.groups
    )
    report_age = s.report_age_s + dt_s
    return replace(
        s,
        report_age_s=round(report_age, 3),
        step_age_s=round(s.step_age_s + dt_s, 3) if s.has_step else s.step_age_s,
        groups=groups,
        reporting=s.reporting and report_age <= heartbeat_limit_s,
        kernel_age_s=round(s.kernel_age_s + dt_s, 3) if s.kernel else 0.0,
    )


def merge_summaries(
    local: Iterable[RankSummary], remote: Iterable[RankSummary]
) -> list[RankSummary]:
    """One summary per rank, ordered by rank; this sidecar's own wins over hearsay."""
    out = {s.rank: s for s in remote}
    out.update({s.rank: s for s in local})
    return [out[r] for r in sorted(out)]


def analyze_job(ranks: Sequence[RankSummary]) -> Diagnosis:
    """:func:`~trainprobe.sidecar.core.culprit.analyze` for a job in trouble.

    A job where every rank reports and none is hung or unresponsive is
    healthy: the instantaneous picture of a running job (some ranks in an
    allreduce, others still computing) must not read as a straggler.
    """
    live = [r for r in ranks if r.ended != "goodbye"]
    world = max((r.world_size for r in ranks), default=0)
    troubled = [r for r in live if r.verdict in _TROUBLE or not r.reporting or r.ended]
    if live and not troubled and len({r.rank for r in ranks}) >= world:
        steps = [r.step for r in live if r.has_step]
        at = f"steps {min(steps)}..{max(steps)}" if steps else "no step yet"
        return Diagnosis(
            HEALTHY,
            summary=f"no rank is hung or unresponsive ({len(live)} ranks reporting, {at})",
        )
    # A replicated job: its culprit replica named, the replicas waiting for it spared.
    return apply_replicas(ranks, analyze(ranks))


class CoordinatorState:
    """The coordinator's memory for one job: each sidecar's ranks, and the episode.

    ``now`` is the coordinator's own monotonic clock; ages in replies are
    measured on it. A sidecar silent for ``stale_after_s`` is forgotten, and so
    is an episode whose opener is.
    """

    def __init__(self, stale_after_s: float = 30.0) -> None:
        self.stale_after_s = stale_after_s
        self._ranks: dict[str, tuple[float, tuple[RankSummary, ...]]] = {}
        self.episode: EpisodeNote | None = None
        self.last_sync_at = 0.0

    def sync(
        self,
        sidecar_id: str,
        summaries: Sequence[RankSummary],
        note: EpisodeNote | None,
        now: float,
    ) -> SyncReply:
        """Store ``sidecar_id``'s ranks and episode note; answer with the others'."""
        self.last_sync_at = now
        self._ranks[sidecar_id] = (now, tuple(summaries))
        for sid in [s for s, (t, _) in self._ranks.items() if now - t > self.stale_after_s]:
            del self._ranks[sid]
        ep = self.episode
        if ep is not None and ep.opened_by not in self._ranks:
            ep = None  # its opener is gone
        if ep is not None and ep.opened_by == sidecar_id and (note is None or note.id != ep.id):
            ep = None  # closed by the sidecar that opened it
        if note is not None and note.opened_by == sidecar_id and ep is None:
            ep = note  # first come: one episode per job at a time
        elif note is not None and ep is not None and note.id == ep.id and note.where:
            # Followers add where their culprits are stuck.
            ep = replace(ep, where={**ep.where, **note.where})
        self.episode = ep
        others = tuple(
            (s, max(0.0, now - t))
            for sid, (t, ranks) in self._ranks.items()
            if sid != sidecar_id
            for s in ranks
        )
        return SyncReply(others, ep)


class JobView:
    """What this sidecar heard from the coordinators, per job.

    ``now`` is this sidecar's monotonic clock. Summaries are aged by how long
    they waited at the coordinator plus how long ago the reply arrived.
    """

    def __init__(self) -> None:
        self._replies: dict[str, tuple[float, SyncReply]] = {}

    def update(self, job_id: str, reply: SyncReply, now: float) -> None:
        self._replies[job_id] = (now, reply)

    def forget(self, job_id: str) -> None:
        """Drop what was heard of a job that has no rank here any more."""
        self._replies.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._replies

    def __len__(self) -> int:
        return len(self._replies)

    def remote(self, job_id: str, now: float, heartbeat_limit_s: float) -> list[RankSummary]:
        entry = self._replies.get(job_id)
        if entry is None:
            return []
        received_at, reply = entry
        return [
            aged(s, age + max(0.0, now - received_at), heartbeat_limit_s) for s, age in reply.others
        ]

    def episode(self, job_id: str) -> EpisodeNote | None:
        entry = self._replies.get(job_id)
        return entry[1].episode if entry is not None else None
