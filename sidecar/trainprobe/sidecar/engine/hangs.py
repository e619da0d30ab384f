"""The engine's hang desk: a job's hang as one diagnosed episode.

For the first HUNG/UNRESPONSIVE incident of a job, :class:`HangResponder` builds
a :class:`~trainprobe.sidecar.core.culprit.RankSummary` of every rank (this
sidecar's own, plus those other sidecars share through the
:class:`~trainprobe.sidecar.core.jobview.JobView`), runs the analysis and opens
the job's episode; the episode's watch (:mod:`.watch`) then gathers evidence
and decides when to act. It also follows episodes another sidecar opened and
decided (acting at once on the culprits this one serves, after reading their
stacks), and finds the ranks a sweep must still kill after
``job_kill_grace_s``. Decisions are the core's; this module only gathers
their inputs and carries them out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from trainprobe.sidecar.core.actions import Action, for_replicas, is_destructive
from trainprobe.sidecar.core.culprit import Diagnosis, RankSummary, analyze
from trainprobe.sidecar.core.episodes import (
    HANG_VERDICTS,
    CulpritPolicy,
    Episode,
    JobEpisodes,
    plan_targets,
)
from trainprobe.sidecar.core.evidence import stale_after_s
from trainprobe.sidecar.core.incidents import Incident, next_incident_id
from trainprobe.sidecar.core.jobview import EpisodeNote, JobView, analyze_job, merge_summaries
from trainprobe.sidecar.core.model import Finding, Verdict, WorkerState, heard_every_ms
from trainprobe.sidecar.core.policy import ActionPolicy, KillBudget, decide
from trainprobe.sidecar.core.registry import Registry
from trainprobe.sidecar.core.replicas import apply_replicas, replica_evidence
from trainprobe.sidecar.core.rules import RuleConfig, heartbeat_limit_s
from trainprobe.sidecar.core.summary import summarize

__all__ = ["MAX_INSPECTED", "HangResponder", "Opened", "StackSource"]

log = logging.getLogger("trainprobe.sidecar")
#: Most ranks whose stacks one incident collects (the culprits come first).
MAX_INSPECTED = 8


class StackSource(Protocol):
    async def collect(
        self, state: WorkerState, signals: bool = True, flight_recorder: bool = True
    ) -> dict[str, object]: ...


#: An incident to dispatch, the ranks whose stacks to read first, its episode.
Opened = tuple[Incident, list[WorkerState], Episode]


class HangResponder:
    """Job episodes: open, follow, inspect, sweep. Runs on the sidecar's loop."""

    def __init__(
        self,
        registry: Registry,
        rules: RuleConfig,
        policy: ActionPolicy,
        budget: KillBudget,
        culprits: CulpritPolicy | None = None,
        stacks: StackSource | None = None,
        job_view: JobView | None = None,
        sidecar_id: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.rules = rules
        self.policy = policy
        self.budget = budget
        self.episodes = JobEpisodes(culprits or CulpritPolicy())
        self.stacks = stacks
        #: Other sidecars' ranks (Ray coordinator); None when this one serves whole jobs.
        self.job_view = job_view
        self.sidecar_id = sidecar_id
        #: Where this sidecar found the culprits of another sidecar's episode stuck,
        #: by that episode's id: told to the coordinator even after ours closed.
        self._found: dict[str, dict[int, str]] = {}
        self._clock = clock
        self._wall = wall_clock

    # -- the job's view ------------------------------------------------------------

    def forget_job(self, job_id: str) -> None:
        """The job has no session here any more: drop what was kept for it."""
        if self.job_view is not None:
            self.job_view.forget(job_id)

    def local_summaries(self, job_id: str, now: float) -> list[RankSummary]:
        """The ranks of ``job_id`` that report to this sidecar (what it shares)."""
        return [
            summarize(
                w, now, min(heartbeat_limit_s(w, self.rules), stale_after_s(heard_every_ms(w)))
            )
            for w in self.registry
            if w.hello.job_id == job_id
        ]

    def summaries(self, job_id: str, now: float) -> list[RankSummary]:
        """Every rank of ``job_id``: this sidecar's own, then what others share."""
        remote: list[RankSummary] = []
        if self.job_view is not None:
            remote = self.job_view.remote(job_id, now, self.rules.heartbeat_timeout_s)
        return merge_summaries(self.local_summaries(job_id, now), remote)

    def diagnose(self, job_id: str) -> tuple[Diagnosis, Episode | None]:
        """The current analysis of a job (``trainprobe diagnose``), with its open episode."""
        summaries = self.summaries(job_id, self._clock())
        if not summaries:
            raise LookupError(f"no rank of job {job_id!r} has reported to this sidecar")
        ep = self.episodes.get(job_id)
        # While this sidecar watches the job, its diagnosis has the evidence in it.
        diag = ep.diagnosis if ep is not None and ep.leader else analyze_job(summaries)
        note = self.job_view.episode(job_id) if self.job_view is not None else None
        where = {**(note.where if note else {}), **(ep.where if ep else {})}
        return diag.with_where({r: p for r, p in where.items() if r in diag.culprits}), ep

    def note(self, job_id: str) -> EpisodeNote | None:
        """What this sidecar tells the job's coordinator about the job's episode.

        A follower whose own episode is already over (its culprit killed) still
        reports where it found the culprit stuck, until the coordinator has it.
        """
        ep = self.episodes.get(job_id)
        if ep is None:
            remote = self.job_view.episode(job_id) if self.job_view is not None else None
            found = self._found.get(remote.id, {}) if remote is not None else {}
            if remote is None or not found or found.items() <= remote.where.items():
                return None
            return EpisodeNote(
                id=remote.id, job_id=job_id, opened_by="", verdict="", rule="", where=dict(found)
            )
        if ep.leader and not ep.acted:
            # Watched, not decided: followers act on the leader's decision only.
            return None
        inc = ep.incident
        return EpisodeNote(
            id=ep.remote_id or ep.id,
            job_id=job_id,
            opened_by=self.sidecar_id if ep.leader else "",
            verdict=inc.verdict.value if inc else "",
            rule=inc.rule if inc else "",
            kind=ep.diagnosis.kind,
            culprits=ep.diagnosis.culprits,
            text=ep.diagnosis.text,
            where=dict(ep.where),
        )

    # -- opening and following episodes ------------------------------------------

    def open(
        self, incident: Incident, workers: list[WorkerState], findings: list[Finding], now: float
    ) -> Opened:
        """Diagnose the job of a first hang incident and open its episode.

        Nothing is decided yet: the episode's watch (engine/watch.py) gathers
        evidence, publishes the incident and acts when the evidence is
        definitive or the patience is spent. Until then the episode observes.
        """
        diag = analyze_job(self.summaries(incident.job_id, now))
        served = _served(incident.job_id, workers)
        incident.diagnosis = diag.to_record()
        pids = {r: w.hello.pid for r, w in served.items() if not w.ended}
        ep = self.episodes.open(
            incident.job_id, incident.id, diag, pids, Action.OBSERVE, now, incident
        )
        ep.onset_at = incident.onset_at
        return incident, _to_inspect(diag, incident, served), ep

    def follow(
        self, workers: list[WorkerState], findings: list[Finding], now: float
    ) -> list[Opened]:
        """Act on this sidecar's culprits of a hang another sidecar detected first."""
        # Every tick asks; with nothing heard from a coordinator (one sidecar
        # per job, the common case) no pass over the workers is needed.
        if self.job_view is None or not len(self.job_view):
            return []
        out = []
        for job_id in sorted({w.hello.job_id for w in workers}):
            note = self.job_view.episode(job_id)
            if note is None or note.opened_by == self.sidecar_id:
                continue
            served = _served(job_id, workers)
            if not self.episodes.should_follow(note.id, job_id) or all(
                w.ended for w in served.values()
            ):
                continue
            # The sidecar that opened it judged the job in trouble: no health gate.
            summaries = self.summaries(job_id, now)
            diag = apply_replicas(summaries, analyze(summaries))
            incident = _remote_incident(note, job_id, now, self._wall())
            action = self._plan(incident, diag, served, findings, now)
            pids = {r: w.hello.pid for r, w in served.items() if not w.ended}
            targets = [served[r] for r in incident.targets]
            log.info("job %s: following hang episode %s of %s", job_id, note.id, note.opened_by)
            if not targets:
                # Nothing of ours to act on now: follow it to absorb and sweep.
                self.episodes.open(job_id, note.id, diag, pids, action, now, None, note.id)
                continue
            incident.ranks = [t.hello.rank for t in targets]
            incident.pids = [t.hello.pid for t in targets]
            incident.hosts = sorted({t.hello.host for t in targets if t.hello.host})
            incident.onset_at = min(t.last_step_at if t.has_step else now for t in targets)
            incident.evidence = {
                str(t.hello.rank): {"episode": note.id, "detected_by": note.opened_by}
                for t in targets
            }
            ep = self.episodes.open(job_id, incident.id, diag, pids, action, now, incident, note.id)
            out.append((incident, _to_inspect(diag, incident, served), ep))
        return out

    def _plan(
        self,
        incident: Incident,
        diag: Diagnosis,
        served: dict[int, WorkerState],
        findings: list[Finding],
        now: float,
    ) -> str:
        """Set the incident's targets, diagnosis and action; return the episode's action.

        The episode's action is what a sweep of the job's remaining ranks does
        after the grace: the incident's own when it kills, the policy's when
        the culprits live on another sidecar (which kills them), else observe.
        """
        stalled = {
            f.key.rank
            for f in findings
            if f.key.job_id == incident.job_id and f.verdict in HANG_VERDICTS
        }
        targets, why = plan_targets(diag, served, stalled, self.episodes.policy)
        incident.targets = targets
        incident.diagnosis = diag.to_record()
        decide(incident, self.policy, self.budget, now)
        incident.action_reason += f"; {why}"
        rep = replica_evidence(diag.evidence)
        if rep is not None and rep.culprits:
            incident.action = for_replicas(incident.action, True)
            if incident.action == Action.EVICT:
                incident.diagnosis["eviction"] = {
                    "replicas": list(rep.culprits),
                    "replicas_left": rep.survivors,
                }
                return Action.OBSERVE  # the other replicas go on: no sweep
        if self.policy.dry_run:
            return Action.OBSERVE
        if is_destructive(incident.action):
            return incident.action
        action = self.policy.for_verdict(incident.verdict)
        remote_culprits = diag.conclusive and not targets
        return action if remote_culprits and is_destructive(action) else Action.OBSERVE

    # -- stacks, sweeps, the end ---------------------------------------------------

    async def inspect(
        self, incident: Incident, states: list[WorkerState], episode: Episode | None
    ) -> None:
        """Read the stacks of ``states`` into the incident's diagnosis (``stacks``, ``where``)."""
        if self.stacks is None or not states:
            return
        t0 = self._clock()
        # A dry run or an observe verdict signals nothing, the stack signal included.
        signals = not incident.dry_run and is_destructive(incident.action)
        records = await asyncio.gather(
            *(self.stacks.collect(w, signals) for w in states), return_exceptions=True
        )
        seconds = round(self._clock() - t0, 3)
        stacks: dict[str, object] = {}
        where: dict[int, str] = {}
        for w, rec in zip(states, records, strict=True):
            if isinstance(rec, BaseException):
                rec = {"method": "", "error": repr(rec)}
            stacks[str(w.hello.rank)] = rec
            if rec.get("where"):
                where[w.hello.rank] = str(rec["where"])
        diag = episode.diagnosis if episode is not None else Diagnosis("")
        # Only culprits get a "stuck at": a waiting rank's stack is evidence, not a cause.
        where = {r: p for r, p in where.items() if r in diag.culprits}
        diag = diag.with_where(where)
        if episode is not None:
            episode.diagnosis = diag
            episode.where.update(where)
            if episode.remote_id and where:
                self._found = {
                    episode.remote_id: {**self._found.get(episode.remote_id, {}), **where}
                }
        incident.diagnosis = {
            **(incident.diagnosis or {}),
            **diag.to_record(),
            "stacks": stacks,
            # How long reading the stacks held the incident (and the kill) back.
            "stacks_s": seconds,
        }

    def due_sweeps(self, workers: list[WorkerState], now: float) -> list[tuple[Episode, list[int]]]:
        """Episodes past their grace, with the ranks still holding their job."""
        out = []
        for ep in self.episodes.due_sweeps(now):
            states = {w.hello.rank: w for w in workers if w.hello.job_id == ep.job_id}
            ranks = self.episodes.remaining(ep, states)
            if ranks:
                out.append((ep, ranks))
        return out

    def settle(self, workers: list[WorkerState]) -> list[Episode]:
        if not len(self.episodes):
            return []  # every tick asks; most ticks have no open episode
        # Only the jobs with an open episode: the others' ranks are not looked at.
        by_job: dict[str, dict[int, WorkerState]] = {}
        is_open = self.episodes.get
        for w in workers:
            job = w.hello.job_id
            if is_open(job) is not None:
                by_job.setdefault(job, {})[w.hello.rank] = w
        return self.episodes.settle(by_job)


def _served(job_id: str, workers: list[WorkerState]) -> dict[int, WorkerState]:
    """The ranks of ``job_id`` this sidecar can act on."""
    return {
        w.hello.rank: w
        for w in workers
        if w.hello.job_id == job_id and w.ended != "goodbye" and not w.killed_by_us
    }


def _to_inspect(
    diag: Diagnosis, incident: Incident, served: dict[int, WorkerState]
) -> list[WorkerState]:
    """Whose stacks to read: the targets, else the local culprits, else the stalled."""
    ranks = incident.targets or [r for r in diag.culprits if r in served] or incident.ranks
    return [served[r] for r in ranks if r in served and not served[r].ended][:MAX_INSPECTED]


def _remote_incident(note: EpisodeNote, job_id: str, now: float, wall: float) -> Incident:
    return Incident(
        id=next_incident_id(),
        time=wall,
        detected_at=now,
        job_id=job_id,
        rule="remote_episode",
        verdict=Verdict(note.verdict) if note.verdict else Verdict.HUNG,
        ranks=[],
        pids=[],
        hosts=[],
        evidence={},
        onset_at=now,
    )
