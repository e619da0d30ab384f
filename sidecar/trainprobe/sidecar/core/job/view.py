"""A job seen whole: this sidecar's ranks plus the summaries other sidecars share.

Per-node sidecars each see their own node's ranks. Through a job-level
coordinator (on Ray: a detached actor per job) they exchange compact
:class:`~trainprobe.sidecar.core.judge.culprit.RankSummary` objects: each uploads
its own ranks, and gets the others' only while it needs them to analyse the
whole job (a suspect rank, an episode, a ``diagnose``), as the changes since
the version it holds; otherwise a digest of bounded size
(:mod:`~trainprobe.sidecar.core.job.digest`), so that what a sidecar receives
in a healthy job does not grow with the number of nodes. This module is the
pure part of that exchange:

- :class:`CoordinatorState`: what the coordinator keeps
  (:class:`~trainprobe.sidecar.core.job.store.RankStore`) and answers;
- :class:`JobView`: what one sidecar keeps of the answers, and asks next;
- :func:`aged`: a summary made older by the time it spent in transit, so no
  two hosts need agreeing clocks (every age is measured on one clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.job.digest import (
    DETAIL_LINGER_S,
    REPORTING_REFRESH_S,
    JobDigest,
    needs_detail,
)
from trainprobe.sidecar.core.job.store import RankStore
from trainprobe.sidecar.core.judge.culprit import HEALTHY, Diagnosis, RankSummary, analyze
from trainprobe.sidecar.core.judge.replicas import apply_replicas

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
    """The coordinator's answer to one sidecar: the others' ranks (or a digest), the episode.

    A sidecar that asked for no detail gets ``detail=False``, no ranks and the
    digest; one that asked for the changes since a version gets them
    (``full=False``) and ``gone``, the ranks to drop; otherwise every other rank.
    """

    #: (summary, seconds since the coordinator received it) of other sidecars' ranks.
    others: tuple[tuple[RankSummary, float], ...] = ()
    episode: EpisodeNote | None = None
    digest: JobDigest | None = None
    detail: bool = True
    full: bool = True
    gone: tuple[int, ...] = ()
    #: What to ask the next delta since: (the store's instance, its version).
    since: tuple[str, int] | None = None


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
    """:func:`~trainprobe.sidecar.core.judge.culprit.analyze` for a job in trouble.

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
    """The coordinator's memory for one job: its ranks (:class:`RankStore`), and the episode.

    ``now`` is the coordinator's own monotonic clock; ages in replies are
    measured on it. A sidecar silent for ``stale_after_s`` is forgotten with
    its ranks, and so is an episode whose opener is.
    """

    def __init__(self, stale_after_s: float = 30.0, instance: str = "") -> None:
        self.stale_after_s = stale_after_s
        self.store = RankStore(instance)
        #: Each sidecar's last sync, the least recent first.
        self._seen: dict[str, float] = {}
        self.episode: EpisodeNote | None = None
        self.last_sync_at = 0.0

    def sync(
        self,
        sidecar_id: str,
        summaries: Sequence[RankSummary],
        note: EpisodeNote | None,
        now: float,
        detail: bool = True,
        since: tuple[str, int] | None = None,
        refresh: float = REPORTING_REFRESH_S,
    ) -> SyncReply:
        """Store ``sidecar_id``'s ranks and episode note; answer with the episode, and
        the others' ranks (all, or those changed ``since``) or, without ``detail``,
        the job's digest. ``refresh``: :func:`~.digest.refresh_s` of the
        sidecar's heartbeat limit."""
        self.last_sync_at = now
        self._seen.pop(sidecar_id, None)
        self._seen[sidecar_id] = now
        while self._seen:  # least recent first: stop at a fresh one (no pass over all)
            sid, t = next(iter(self._seen.items()))
            if now - t <= self.stale_after_s:
                break
            del self._seen[sid]
            self.store.forget(sid)
        store = self.store
        store.upload(sidecar_id, summaries, now, refresh)
        self.episode = ep = self._episode(sidecar_id, note)
        digest = store.digest(now)
        upto = (store.instance, store.version)
        if not detail:
            return SyncReply((), ep, digest, detail=False, full=False)
        if since is None or since[0] != store.instance or since[1] > store.version:
            return SyncReply(store.full(sidecar_id, now), ep, digest, since=upto)
        others, gone = store.delta(sidecar_id, since[1], now)
        return SyncReply(others, ep, digest, full=False, gone=gone, since=upto)

    def _episode(self, sidecar_id: str, note: EpisodeNote | None) -> EpisodeNote | None:
        ep = self.episode
        if ep is not None and ep.opened_by not in self._seen:
            ep = None  # its opener is gone
        if ep is not None and ep.opened_by == sidecar_id and (note is None or note.id != ep.id):
            ep = None  # closed by the sidecar that opened it
        if note is not None and note.opened_by == sidecar_id and ep is None:
            ep = note  # first come: one episode per job at a time
        elif note is not None and ep is not None and note.id == ep.id and note.where:
            # Followers add where their culprits are stuck.
            ep = replace(ep, where={**ep.where, **note.where})
        return ep


@dataclass
class _Heard:
    """One job as this sidecar holds it."""

    episode: EpisodeNote | None = None
    digest: JobDigest | None = None
    #: rank -> (summary, its age at the coordinator, when the reply came).
    ranks: dict[int, tuple[RankSummary, float, float]] = field(default_factory=dict)
    #: Whether ``ranks`` are the others' (details asked and received).
    detail: bool = False
    since: tuple[str, int] | None = None
    wanted_until: float = float("-inf")


class JobView:
    """What this sidecar heard from the coordinators, per job.

    ``now`` is this sidecar's monotonic clock. Summaries are aged by how long
    they waited at the coordinator plus how long ago the reply arrived. The
    others' ranks are held only while details are asked (:meth:`ask`), and
    kept up to date with deltas.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, _Heard] = {}

    def ask(
        self, job_id: str, local: Sequence[RankSummary], needed: bool, now: float
    ) -> tuple[bool, tuple[str, int] | None]:
        """What to ask the job's coordinator for: (details?, since what version).

        Details are asked while :func:`~.digest.needs_detail` says so (or
        ``needed``: an episode open here, a rank here gone silent), and for
        DETAIL_LINGER_S after, so that a brief doubt does not flap."""
        heard = self._jobs.get(job_id) or _Heard()
        episode = needed or heard.episode is not None
        if needs_detail(local, heard.digest, episode, float("-inf"), now):
            self.want(job_id, now + DETAIL_LINGER_S)
        elif now >= heard.wanted_until:
            return False, None
        return True, heard.since if heard.detail else None

    def want(self, job_id: str, until: float) -> None:
        """Ask for the others' ranks until ``until`` (``trainprobe diagnose`` reads them)."""
        heard = self._jobs.setdefault(job_id, _Heard())
        heard.wanted_until = max(heard.wanted_until, until)

    def update(self, job_id: str, reply: SyncReply, now: float) -> None:
        heard = self._jobs.setdefault(job_id, _Heard())
        heard.episode, heard.digest = reply.episode, reply.digest
        if not reply.detail:
            heard.ranks.clear()  # not needed: not held
            heard.detail, heard.since = False, None
            return
        if reply.full:
            heard.ranks.clear()
        for rank in reply.gone:
            heard.ranks.pop(rank, None)
        for s, age in reply.others:
            heard.ranks[s.rank] = (s, age, now)
        heard.detail, heard.since = True, reply.since

    def forget(self, job_id: str) -> None:
        """Drop what was heard of a job that has no rank here any more."""
        self._jobs.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def remote(self, job_id: str, now: float, heartbeat_limit_s: float) -> list[RankSummary]:
        heard = self._jobs.get(job_id)
        if heard is None:
            return []
        return [
            aged(s, age + max(0.0, now - at), heartbeat_limit_s)
            for s, age, at in heard.ranks.values()
        ]

    def awaiting(self, job_id: str) -> bool:
        """Whether only the job's digest is held: its other ranks are yet to come."""
        heard = self._jobs.get(job_id)
        return heard is not None and heard.digest is not None and not heard.detail

    def detailed(self, job_id: str) -> bool:
        """Whether the others' ranks of the job are held (not only its digest)."""
        heard = self._jobs.get(job_id)
        return heard is not None and heard.detail

    def digest(self, job_id: str) -> JobDigest | None:
        heard = self._jobs.get(job_id)
        return heard.digest if heard is not None else None

    def episode(self, job_id: str) -> EpisodeNote | None:
        heard = self._jobs.get(job_id)
        return heard.episode if heard is not None else None
