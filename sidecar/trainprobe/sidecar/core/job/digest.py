"""What a job's coordinator tells a sidecar that needs no rank of the others.

Under Ray every sidecar of a job syncs with the job's coordinator twice a
second. A healthy job needs nothing from the other nodes: the rules judge
each rank on its own node, and the job's ranks are read together only when
an episode opens or is watched, followed or diagnosed. So a sidecar asks for
the other sidecars' ranks (a delta since the version it holds) only while it
needs them (:func:`needs_detail`), and is otherwise answered with a
:class:`JobDigest` of bounded size: how many ranks the coordinator holds, the
range of their steps, and the first few suspect ranks. Its size does not grow
with the number of nodes; a suspect rank anywhere makes every sidecar of the
job fetch the details before a verdict can open an episode.

Pure: summaries and plain numbers in, plain values out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from operator import attrgetter

from trainprobe.sidecar.core.judge.diagnosis import RankSummary

__all__ = [
    "DETAIL_LINGER_S",
    "DETAIL_WAIT_S",
    "DIGEST_MAX_SUSPECTS",
    "REPORTING_REFRESH_S",
    "SUSPECT_AFTER_S",
    "JobDigest",
    "digest_of",
    "is_suspect",
    "needs_detail",
    "refresh_s",
    "same_summary",
    "state_key",
]

#: A rank whose oldest collective waited, or whose last step is older than
#: its normal step time, this long at least is suspect. Every hang verdict needs
#: 3 s without progress (the shipped stall floor and sync_timeout_s): this leaves
#: a few syncs for the details to arrive before an episode opens. Above the
#: second a report's snapshot can keep a healthy collective "in flight".
SUSPECT_AFTER_S = 1.5
#: Most suspect ranks a digest names (the count is always exact).
DIGEST_MAX_SUSPECTS = 16
#: A sidecar keeps fetching details this long after its last reason to.
DETAIL_LINGER_S = 10.0
#: An episode's evidence rounds wait at most this long for the details
#: (they come at the next sync: an open episode asks for them).
DETAIL_WAIT_S = 5.0
#: A reporting rank whose summary is otherwise unchanged is sent again once
#: its report age at the receivers would pass this, or a third of the
#: heartbeat limit if less (:func:`refresh_s`): past that limit a receiver
#: counts it silent.
REPORTING_REFRESH_S = 3.0
#: Ages that differ by less than this are the same (transit time jitters).
_AGE_SLACK_S = 0.5
_AGES = frozenset({"report_age_s", "step_age_s", "kernel_age_s", "ft_wait_age_s"})
_OTHERS = tuple(f.name for f in fields(RankSummary) if f.name not in _AGES | {"groups"})
#: Those fields of a summary, as one tuple: a coordinator compares every
#: uploaded rank at every sync (two syncs a second a node).
_others_of = attrgetter(*_OTHERS)


@dataclass(frozen=True)
class JobDigest:
    """A job at a glance, as its coordinator holds it (bounded in size)."""

    #: The coordinator's version of the job's ranks (changes when any summary does).
    version: int = 0
    ranks: int = 0
    world_size: int = 0
    reporting: int = 0
    min_step: int = 0
    max_step: int = 0
    #: How many ranks are suspect, and the first DIGEST_MAX_SUSPECTS of them.
    suspects: int = 0
    suspect_ranks: tuple[int, ...] = ()

    @property
    def healthy(self) -> bool:
        """Every rank of the world is held, reports and is not suspect."""
        return not self.suspects and self.ranks >= self.world_size == self.reporting

    def summary(self) -> str:
        """What ``trainprobe diagnose`` says of a healthy job it holds no rank of."""
        at = f"steps {self.min_step}..{self.max_step}" if self.max_step else "no step yet"
        return f"no rank is hung or unresponsive ({self.reporting} ranks reporting, {at})"


def state_key(s: RankSummary) -> tuple[object, ...]:
    """What a rank is doing, without its ages: where it is (step, collectives,
    phases, torchft wait), whether it reports, and what its sidecar and the
    kernel say of it. Two summaries with the same key differ only in how long."""
    groups = tuple(
        (g.group, g.issued, g.completed, g.inflight_seq, g.inflight_op) for g in s.groups
    )
    return (
        is_suspect(s), s.verdict, s.reporting, s.ended, s.phases, s.kernel, s.ft_wait,
        s.has_step, s.step, groups, s.world_size, s.pid, s.replica, s.verified,
    )  # fmt: skip


def is_suspect(s: RankSummary) -> bool:
    """Whether ``s`` may soon be judged hung, or already is: its job's sidecars
    then need each other's ranks."""
    if s.ended == "goodbye":
        return False
    if s.verdict != "OK" or not s.reporting or s.ended:
        return True
    # A collective takes no step's time: its wait is suspect past the floor.
    if any(g.inflight_age_s is not None and g.inflight_age_s >= SUSPECT_AFTER_S for g in s.groups):
        return True
    limit = max(SUSPECT_AFTER_S, s.normal_step_s)
    return s.has_step and not s.phases and s.normal_step_s > 0 and s.step_age_s >= limit


def digest_of(ranks: Iterable[RankSummary], version: int) -> JobDigest:
    """The digest of a job's ranks (the coordinator caches it: it reads every rank)."""
    n = reporting = suspects = world = 0
    lo, hi = -1, 0
    named: list[int] = []
    for s in ranks:
        n += 1
        world = max(world, s.world_size)
        reporting += s.reporting and not s.ended
        if s.has_step:
            lo = s.step if lo < 0 else min(lo, s.step)
            hi = max(hi, s.step)
        if is_suspect(s):
            suspects += 1
            if len(named) < DIGEST_MAX_SUSPECTS:
                named.append(s.rank)
    return JobDigest(version, n, world, reporting, max(lo, 0), hi, suspects, tuple(sorted(named)))


def needs_detail(
    local: Iterable[RankSummary],
    digest: JobDigest | None,
    episode: bool,
    wanted_until: float,
    now: float,
    most_ranks: int | None = None,
) -> bool:
    """Whether a sidecar should fetch the other sidecars' ranks of a job now.

    ``episode``: a hang episode of the job is open here or at the coordinator;
    ``wanted_until``: until when a reader (``trainprobe diagnose``) or an
    earlier reason keeps them wanted; ``most_ranks``: the most ranks a digest
    of the job ever said were held (None: count every rank short of the world).
    """
    if episode or now < wanted_until:
        return True
    if digest is not None and (digest.suspects or _lost(digest, most_ranks)):
        return True  # a rank missing is one the analysis would call unresponsive
    return any(is_suspect(s) for s in local)


def _lost(digest: JobDigest, most_ranks: int | None) -> bool:
    """Whether the job lacks a rank it once had. A job still connecting lacks
    ranks that never came: at 12,500 nodes that takes minutes, and each node
    that fetched the details for it then cost the upstream a message and an
    analysis of the whole job each sync (the upstream saturated on one core).
    A rank that never comes blocks the others' collectives, which makes them
    suspect: that is asked for."""
    short = digest.ranks < digest.world_size
    return short and (most_ranks is None or digest.ranks < most_ranks)


def refresh_s(heartbeat_timeout_s: float) -> float:
    """How old a reporting rank's held report may grow before it is sent again."""
    return min(REPORTING_REFRESH_S, heartbeat_timeout_s / 3.0)


def same_summary(
    before: RankSummary, now: RankSummary, dt_s: float, refresh: float = REPORTING_REFRESH_S
) -> bool:
    """Whether ``now`` says nothing that ``before``, taken ``dt_s`` earlier, does not.

    Receivers age what they hold, so only a change beyond aging is news; a
    reporting rank's fresh report is news only once the held one is
    ``refresh`` seconds old (:func:`refresh_s`).
    """
    if _others_of(before) != _others_of(now):
        return False
    held_report_age = before.report_age_s + dt_s
    if now.reporting and held_report_age >= refresh:
        return False
    if not now.reporting and abs(held_report_age - now.report_age_s) > _AGE_SLACK_S:
        return False
    if before.has_step and abs(before.step_age_s + dt_s - now.step_age_s) > _AGE_SLACK_S:
        return False
    if before.kernel and abs(before.kernel_age_s + dt_s - now.kernel_age_s) > _AGE_SLACK_S:
        return False
    # Receivers do not age a torchft wait: it is news while it grows.
    if abs(before.ft_wait_age_s - now.ft_wait_age_s) > _AGE_SLACK_S:
        return False
    if len(before.groups) != len(now.groups):
        return False
    for a, b in zip(before.groups, now.groups, strict=True):
        if (a.group, a.issued, a.completed, a.inflight_op, a.inflight_seq) != (
            b.group,
            b.issued,
            b.completed,
            b.inflight_op,
            b.inflight_seq,
        ):
            return False
        if a.inflight_age_s is None or b.inflight_age_s is None:
            if a.inflight_age_s != b.inflight_age_s:
                return False
        elif abs(a.inflight_age_s + dt_s - b.inflight_age_s) > _AGE_SLACK_S:
            return False
    return True
