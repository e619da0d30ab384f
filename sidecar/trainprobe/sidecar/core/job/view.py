"""A job seen whole: this sidecar's ranks plus the summaries other sidecars share.

Per-node sidecars each see their own node's ranks. Through a job-level
coordinator (on Ray: a detached actor per job) they exchange compact
:class:`~trainprobe.sidecar.core.judge.culprit.RankSummary` objects: each uploads
its own ranks, and gets the others' only while it needs them to analyse the
whole job (a suspect rank, an episode, a ``diagnose``), as the changes since
the version it holds, or, once the job is too large to send whole, the
coordinator's verdict on the whole job and the few ranks it names
(:mod:`~trainprobe.sidecar.core.job.verdict`); otherwise a digest of bounded
size (:mod:`~trainprobe.sidecar.core.job.digest`). So what a sidecar receives
does not grow with the number of nodes. The pure part of that exchange:

- :class:`CoordinatorState` (:mod:`.sync`): what the coordinator keeps
  (:class:`~trainprobe.sidecar.core.job.store.RankStore`) and answers;
- :class:`JobView`, here: what one sidecar keeps of the answers, and asks next;
- :func:`aged` (:mod:`.verdict`): a summary made older by the time it spent in
  transit, so no two hosts need agreeing clocks (every age is measured on one clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trainprobe.sidecar.core.job.digest import DETAIL_LINGER_S, JobDigest, needs_detail
from trainprobe.sidecar.core.job.sync import CoordinatorState, EpisodeNote, SyncReply
from trainprobe.sidecar.core.job.verdict import (
    JobVerdict,
    aged,
    healthy_diagnosis,
    too_large_to_send,
)
from trainprobe.sidecar.core.judge.culprit import Diagnosis, RankSummary, analyze
from trainprobe.sidecar.core.judge.replicas import apply_replicas

__all__ = [
    "CoordinatorState",
    "EpisodeNote",
    "JobVerdict",
    "JobView",
    "SyncReply",
    "aged",
    "analyze_job",
    "merge_summaries",
]


def merge_summaries(
    local: Iterable[RankSummary], remote: Iterable[RankSummary]
) -> list[RankSummary]:
    """One summary per rank, ordered by rank; this sidecar's own wins over hearsay."""
    out = {s.rank: s for s in remote}
    out.update({s.rank: s for s in local})
    return [out[r] for r in sorted(out)]


def analyze_job(ranks: Sequence[RankSummary], verdict: JobVerdict | None = None) -> Diagnosis:
    """:func:`~trainprobe.sidecar.core.judge.culprit.analyze` for a job in trouble.

    A job where every rank reports and none is hung or unresponsive is
    healthy (:func:`~.verdict.healthy_diagnosis`). With ``verdict`` (the
    coordinator analysed a job too large to send whole: ``ranks`` are only
    the ones it names) the coordinator's analysis is the job's.
    """
    if verdict is not None:
        return verdict.diagnosis()
    # A replicated job: its culprit replica named, the replicas waiting for it spared.
    return healthy_diagnosis(ranks) or apply_replicas(ranks, analyze(ranks))


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
    #: The coordinator's analysis, when ``ranks`` are only the ones it names.
    analysis: JobVerdict | None = None
    #: The most ranks a digest said the coordinator held (a rank lost is news,
    #: one not yet connected is not: digest.needs_detail).
    most_ranks: int = 0


class JobView:
    """What this sidecar heard from the coordinators, per job.

    ``now`` is this sidecar's monotonic clock. Summaries are aged by how long
    they waited at the coordinator plus how long ago the reply arrived. The
    others' ranks are held only while details are asked (:meth:`ask`), and
    kept up to date with deltas, or, for a job too large to send whole (asked
    ``bounded``, as the Ray job sync does), replaced by the ranks the
    coordinator's verdict names (:meth:`verdict`).
    """

    def __init__(self, bounded: bool = True) -> None:
        self._jobs: dict[str, _Heard] = {}
        #: Whether to ask the coordinator for bounded answers (its ``sync``'s ``bounded``).
        self.bounded = bounded

    def ask(
        self, job_id: str, local: Sequence[RankSummary], needed: bool, now: float
    ) -> tuple[bool, tuple[str, int] | None]:
        """What to ask the job's coordinator for: (details?, since what version).

        Details are asked while :func:`~.digest.needs_detail` says so (or
        ``needed``: an episode open here, a rank here gone silent), and for
        DETAIL_LINGER_S after, so that a brief doubt does not flap."""
        heard = self._jobs.get(job_id) or _Heard()
        episode = needed or heard.episode is not None
        if needs_detail(local, heard.digest, episode, float("-inf"), now, heard.most_ranks):
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
        # A closed note is never an episode to follow (none is sent down; defensive).
        ep = reply.episode if reply.episode is None or not reply.episode.closed else None
        heard.episode, heard.digest = ep, reply.digest
        if reply.digest is not None:
            heard.most_ranks = max(heard.most_ranks, reply.digest.ranks)
        heard.analysis = reply.verdict if reply.detail else None
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

    def new_source(self) -> None:
        """Answers come from a coordinator that may hold nothing yet (a new stream
        to an upstream, which may have restarted): its ranks come back one node at
        a time, which is a start, not ranks lost (:func:`~.digest.needs_detail`)."""
        for heard in self._jobs.values():
            heard.most_ranks = 0

    def forget(self, job_id: str) -> None:
        """Drop what was heard of a job that has no rank here any more."""
        self._jobs.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def held(self) -> tuple[int, int]:
        """Jobs whose other ranks are held, and jobs held as a digest only (status)."""
        detailed = sum(1 for h in self._jobs.values() if h.detail)
        return detailed, sum(
            1 for h in self._jobs.values() if not h.detail and h.digest is not None
        )

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

    def verdict(self, job_id: str) -> JobVerdict | None:
        """The coordinator's analysis of the job, when only the ranks it names are
        held (a job too large to send whole): the job's analysis is that one."""
        heard = self._jobs.get(job_id)
        return heard.analysis if heard is not None else None

    def judged_upstream(self, job_id: str, own: int) -> bool:
        """Whether the upstream judges the job itself and pushes each new analysis
        (:class:`~.uplink.Uplink`'s ``pushed``): its verdict is held, or a bounded
        ask of it gets one (more than MAX_SENT other ranks, by the digest). A node
        of such a job need not resend a reporting rank each refresh nor ask again
        before the verdict comes: at 12,500 nodes whose verdict was late, that was
        6,000 messages a second, which only made it later."""
        heard = self._jobs.get(job_id)
        if heard is None:
            return False
        if heard.analysis is not None:
            return True
        d = heard.digest
        return self.bounded and d is not None and too_large_to_send(d.ranks, own)

    def digest(self, job_id: str) -> JobDigest | None:
        heard = self._jobs.get(job_id)
        return heard.digest if heard is not None else None

    def episode(self, job_id: str) -> EpisodeNote | None:
        heard = self._jobs.get(job_id)
        return heard.episode if heard is not None else None
