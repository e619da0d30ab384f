"""The hang machine's state, and the questions asked of it between steps.

:class:`HangState` is everything the machine (:mod:`.machine`) keeps from one
step to the next: the open episodes, the kill budget, the patience
history, the finding edges, the verdicts flagged, and the other sidecars'
view of each job (:class:`~trainprobe.sidecar.core.job.view.JobView`, which
the Ray job sync fills). The queries here (a job's rank summaries, its
diagnosis, the note for its coordinator, the next evidence round's plan)
read it and the sessions, and change nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.hang.episodes import CulpritPolicy, Episode, JobEpisodes
from trainprobe.sidecar.core.hang.patience import PatienceBook
from trainprobe.sidecar.core.incident.incidents import FindingEdges
from trainprobe.sidecar.core.incident.policy import ActionPolicy, KillBudget
from trainprobe.sidecar.core.job.digest import DETAIL_LINGER_S, is_suspect
from trainprobe.sidecar.core.job.view import (
    EpisodeNote,
    JobVerdict,
    JobView,
    analyze_job,
    merge_summaries,
)
from trainprobe.sidecar.core.judge.culprit import ALL_IN_FLIGHT, HEALTHY, Diagnosis, RankSummary
from trainprobe.sidecar.core.judge.evidence import stale_after_s
from trainprobe.sidecar.core.judge.rules import RuleConfig, heartbeat_limit_s
from trainprobe.sidecar.core.judge.summary import previous_attempt, session_times, summarize
from trainprobe.sidecar.core.session.model import Verdict, WorkerKey, WorkerState, heard_every_ms

__all__ = [
    "MAX_INSPECTED",
    "ROUND_S",
    "STACK_EVERY",
    "HangConfig",
    "HangState",
    "RoundPlan",
    "VerdictOf",
    "diagnose",
    "episode_note",
    "job_verdict",
    "local_summaries",
    "note",
    "plan_round",
    "summaries",
]

#: A session's verdict as of a step (newer than the session's own during one).
VerdictOf = Callable[[WorkerState], Verdict]

#: Most ranks whose stacks one incident collects (the culprits come first).
MAX_INSPECTED = 8
#: Seconds between evidence rounds: CPU and I/O progress are measured over it.
ROUND_S = 1.0
#: After the first three rounds, stacks are read every this many rounds (/proc every round).
STACK_EVERY = 5


@dataclass(frozen=True)
class HangConfig:
    """What the machine is told once: rules, policies, who it is."""

    rules: RuleConfig
    policy: ActionPolicy
    culprits: CulpritPolicy = field(default_factory=CulpritPolicy)
    sidecar_id: str = ""
    #: Whether stacks can be read here (a followed culprit's are, before its action).
    reads_stacks: bool = False
    round_s: float = ROUND_S


@dataclass
class HangState:
    """The machine's memory between steps (see the module docstring)."""

    config: HangConfig
    episodes: JobEpisodes
    budget: KillBudget
    patience: PatienceBook = field(default_factory=PatienceBook)
    edges: FindingEdges = field(default_factory=FindingEdges)
    #: Other sidecars' ranks (Ray coordinator); None when this one serves whole jobs.
    job_view: JobView | None = None
    #: Where this sidecar found the culprits of another sidecar's episode stuck,
    #: by that episode's id: told to the coordinator even after ours closed.
    found: dict[str, dict[int, str]] = field(default_factory=dict)
    #: Sessions whose verdict is not OK: the only ones a step revisits.
    flagged: dict[WorkerKey, None] = field(default_factory=dict)
    #: A job's last episode opened and decided here that closed since the
    #: JobSync took it (the engine's ``closed_note``): one that opened and
    #: closed between two syncs is told to the coordinator once, closed.
    closed: dict[str, EpisodeNote] = field(default_factory=dict)

    @classmethod
    def new(
        cls,
        config: HangConfig,
        patience: PatienceBook | None = None,
        job_view: JobView | None = None,
    ) -> HangState:
        return cls(
            config=config,
            episodes=JobEpisodes(config.culprits),
            budget=KillBudget(config.policy.max_kills_per_hour),
            patience=patience or PatienceBook(),
            job_view=job_view,
        )

    def forget_jobs(self, gone: Iterable[WorkerState], workers: Iterable[WorkerState]) -> None:
        """Jobs whose last session was just forgotten: drop what was kept for them
        (a long-lived sidecar serves many jobs, one after another)."""
        left = {w.hello.job_id for w in workers}
        for job_id in {w.hello.job_id for w in gone} - left:
            self.closed.pop(job_id, None)
            if self.job_view is not None:
                self.job_view.forget(job_id)

    def episode_closed(self, ep: Episode) -> None:
        """Keep the note of a closed episode this sidecar decided, for the JobSync."""
        if self.job_view is not None and ep.leader and ep.acted:
            made = episode_note(self, ep)
            if made is not None:
                self.closed[ep.job_id] = replace(made, closed=True)


def local_summaries(
    state: HangState,
    workers: Iterable[WorkerState],
    job_id: str,
    now: float,
    verdict_of: VerdictOf | None = None,
) -> list[RankSummary]:
    """The ranks of ``job_id`` that report to this sidecar (what it shares); a
    session of an earlier attempt is not the rank now (its new process may not
    have connected yet): the analysis sees that rank as missing."""
    rules = state.config.rules
    job = [w for w in workers if w.hello.job_id == job_id]
    old = previous_attempt(session_times(job))
    return [
        summarize(
            w,
            now,
            min(heartbeat_limit_s(w, rules), stale_after_s(heard_every_ms(w))),
            verdict_of(w) if verdict_of is not None else None,
        )
        for w in job
        if w.hello.rank not in old
    ]


def summaries(
    state: HangState,
    workers: Iterable[WorkerState],
    job_id: str,
    now: float,
    verdict_of: VerdictOf | None = None,
) -> list[RankSummary]:
    """Every rank of ``job_id``: this sidecar's own, then what others share."""
    remote: list[RankSummary] = []
    if state.job_view is not None:
        remote = state.job_view.remote(job_id, now, state.config.rules.heartbeat_timeout_s)
    return merge_summaries(local_summaries(state, workers, job_id, now, verdict_of), remote)


def job_verdict(state: HangState, job_id: str) -> JobVerdict | None:
    """The job's coordinator's analysis, when it sent only the ranks it names
    (a job too large to send whole): then that is the job's analysis."""
    return state.job_view.verdict(job_id) if state.job_view is not None else None


def diagnose(
    state: HangState, workers: Iterable[WorkerState], job_id: str, now: float
) -> tuple[Diagnosis, Episode | None]:
    """The current analysis of a job (``trainprobe diagnose``), with its open episode.

    Where the job's coordinator sent only its digest (a healthy job needs no
    other node's rank), the others' ranks are asked for from now on, and a
    job the digest and this sidecar's ranks call healthy is said healthy."""
    ranks = summaries(state, workers, job_id, now)
    if not ranks:
        raise LookupError(f"no rank of job {job_id!r} has reported to this sidecar")
    ep = state.episodes.get(job_id)
    view = state.job_view
    if view is not None and job_id in view and not view.detailed(job_id):
        view.want(job_id, now + DETAIL_LINGER_S)
        digest = view.digest(job_id)
        if ep is None and digest is not None and digest.healthy and not any(map(is_suspect, ranks)):
            return Diagnosis(HEALTHY, summary=digest.summary()), None
    # While this sidecar watches the job, its diagnosis has the evidence in it.
    diag = (
        ep.diagnosis
        if ep is not None and ep.leader
        else analyze_job(ranks, job_verdict(state, job_id))
    )
    remote = view.episode(job_id) if view is not None else None
    where = {**(remote.where if remote else {}), **(ep.where if ep else {})}
    return diag.with_where({r: p for r, p in where.items() if r in diag.culprits}), ep


def note(state: HangState, job_id: str) -> EpisodeNote | None:
    """What this sidecar tells the job's coordinator about the job's episode.

    A follower whose own episode is already over (its culprit killed) still
    reports where it found the culprit stuck, until the coordinator has it.
    """
    ep = state.episodes.get(job_id)
    view = state.job_view
    if ep is None:
        remote = view.episode(job_id) if view is not None else None
        found = state.found.get(remote.id, {}) if remote is not None else {}
        if remote is None or not found or found.items() <= remote.where.items():
            return None
        return EpisodeNote(
            id=remote.id, job_id=job_id, opened_by="", verdict="", rule="", where=dict(found)
        )
    return episode_note(state, ep)


def episode_note(state: HangState, ep: Episode) -> EpisodeNote | None:
    """``ep`` as its note (None while it is watched, not decided)."""
    if ep.leader and not ep.acted:
        # Watched, not decided: followers act on the leader's decision only.
        return None
    inc = ep.incident
    return EpisodeNote(
        id=ep.remote_id or ep.id,
        job_id=ep.job_id,
        opened_by=state.config.sidecar_id if ep.leader else "",
        verdict=inc.verdict.value if inc else "",
        rule=inc.rule if inc else "",
        kind=ep.diagnosis.kind,
        culprits=ep.diagnosis.culprits,
        text=ep.diagnosis.text,
        where=dict(ep.where),
    )


@dataclass(frozen=True)
class RoundPlan:
    """What an evidence round samples."""

    #: The job's ranks this sidecar serves: culprits first, at most MAX_INSPECTED.
    states: tuple[WorkerState, ...]
    with_stacks: bool
    #: Whose stacks (None: every sampled rank's), and whose Flight Recorder.
    stack_ranks: frozenset[int] | None
    flight_recorder: frozenset[int]
    #: The job's other live local ranks, past the sampled ones: only their
    #: kernel state is read (cheap), so that a pause is judged on every rank.
    others: tuple[WorkerState, ...] = ()


def plan_round(
    state: HangState, ep: Episode, workers: Sequence[WorkerState], round_no: int
) -> RoundPlan | None:
    """Round ``round_no`` of ``ep``'s watch, or None once it closed or acted."""
    if state.episodes.get(ep.job_id) is not ep or ep.acted:
        return None
    served = {
        w.hello.rank: w
        for w in workers
        if w.hello.job_id == ep.job_id
        and ep.pids.get(w.hello.rank, w.hello.pid) == w.hello.pid
        and w.ended != "goodbye"
    }  # a rank that vanished before the episode is sampled too: /proc says it is gone
    first = [r for r in ep.diagnosis.culprits if r in served]
    order = first + sorted(r for r in served if r not in first)
    states = tuple(served[r] for r in order)[:MAX_INSPECTED]
    # Stacks every round at first (the culprit, then "same frames?"), then
    # every STACK_EVERY rounds: each read costs the rank's reporter a dump.
    with_stacks = round_no < 3 or round_no % STACK_EVERY == 0
    # A conclusive analysis of collectives needs only the culprits' stacks
    # (where they are); otherwise every rank's decides who waits.
    diag = ep.diagnosis
    only = frozenset(diag.culprits) if diag.conclusive and diag.kind != ALL_IN_FLIGHT else None
    # The Flight Recorder of the culprits; of every rank when none is named
    # (all in flight: the collective itself is the suspect).
    fr = frozenset(diag.culprits) or frozenset(w.hello.rank for w in states)
    sampled = {w.hello.rank for w in states}
    others = tuple(
        w for r, w in sorted(served.items()) if r not in sampled and w.local and not w.ended
    )
    return RoundPlan(states, with_stacks, only, fr, others)
