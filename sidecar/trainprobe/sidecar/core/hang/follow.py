"""Following another sidecar's hang: act on the culprits served here.

Under Ray, the sidecar that detects a job's hang first opens the episode and
tells the job's coordinator; every other sidecar of the job follows it
(:func:`follow`, part of :func:`~trainprobe.sidecar.core.hang.machine.step`): an
incident with rule ``remote_episode`` whose targets are the culprits this
sidecar serves, acted on once their stacks are read
(:class:`~trainprobe.sidecar.core.hang.effects.Inspect`, then :func:`stacks_read`).
"""

from __future__ import annotations

from collections.abc import Sequence

from trainprobe.sidecar.core.hang.effects import Effect, ExecuteAction, Log, Publish, StacksRead
from trainprobe.sidecar.core.hang.episodes import HANG_VERDICTS, Episode, plan_targets
from trainprobe.sidecar.core.hang.state import (
    MAX_INSPECTED,
    HangState,
    VerdictOf,
    job_verdict,
    summaries,
)
from trainprobe.sidecar.core.incident.actions import Action, for_replicas, is_destructive
from trainprobe.sidecar.core.incident.incidents import Incident, next_incident_id
from trainprobe.sidecar.core.incident.policy import decide
from trainprobe.sidecar.core.job.view import EpisodeNote
from trainprobe.sidecar.core.judge.culprit import Diagnosis, analyze
from trainprobe.sidecar.core.judge.replicas import apply_replicas, replica_evidence
from trainprobe.sidecar.core.session.model import Finding, Verdict, WorkerState

__all__ = ["follow", "served", "stacks_read"]


def served(job_id: str, workers: Sequence[WorkerState]) -> dict[int, WorkerState]:
    """The ranks of ``job_id`` this sidecar can act on."""
    return {
        w.hello.rank: w
        for w in workers
        if w.hello.job_id == job_id and w.ended != "goodbye" and not w.killed_by_us
    }


def follow(
    state: HangState,
    workers: Sequence[WorkerState],
    findings: Sequence[Finding],
    now: float,
    wall: float,
    verdict_of: VerdictOf,
    out: list[Effect],
) -> list[tuple[Incident, list[WorkerState], Episode]]:
    """Act on this sidecar's culprits of a hang another sidecar detected first."""
    view = state.job_view
    # Every tick asks; with nothing heard from a coordinator (one sidecar
    # per job, the common case) no pass over the workers is needed.
    if view is None or not len(view):
        return []
    followed = []
    for job_id in sorted({w.hello.job_id for w in workers}):
        note = view.episode(job_id)
        if note is None or note.opened_by == state.config.sidecar_id:
            continue
        mine = served(job_id, workers)
        if not state.episodes.should_follow(note.id, job_id) or all(w.ended for w in mine.values()):
            continue
        if view.awaiting(job_id):
            continue  # which culprits are ours needs the job's ranks: the next sync brings them
        # The sidecar that opened it judged the job in trouble: no health gate.
        ranks = summaries(state, workers, job_id, now, verdict_of)
        verdict = job_verdict(state, job_id)  # a job too large to send whole: the coordinator's
        diag = apply_replicas(ranks, verdict.diagnosis(False) if verdict else analyze(ranks))
        incident = _remote_incident(note, job_id, now, wall)
        action = _plan(state, incident, diag, mine, findings, now)
        pids = {r: w.hello.pid for r, w in mine.items() if not w.ended}
        targets = [mine[r] for r in incident.targets]
        out.append(
            Log.info("job %s: following hang episode %s of %s", job_id, note.id, note.opened_by)
        )
        episodes = state.episodes
        if not targets:
            # Nothing of ours to act on now: follow it to absorb and sweep.
            episodes.open(job_id, note.id, diag, pids, action, now, None, note.id)
            continue
        incident.ranks = [t.hello.rank for t in targets]
        incident.pids = [t.hello.pid for t in targets]
        incident.hosts = sorted({t.hello.host for t in targets if t.hello.host})
        incident.onset_at = min(t.last_step_at if t.has_step else now for t in targets)
        incident.evidence = {
            str(t.hello.rank): {"episode": note.id, "detected_by": note.opened_by} for t in targets
        }
        ep = episodes.open(job_id, incident.id, diag, pids, action, now, incident, note.id)
        followed.append((incident, _to_inspect(diag, incident, mine), ep))
    return followed


def _plan(
    state: HangState,
    incident: Incident,
    diag: Diagnosis,
    served: dict[int, WorkerState],
    findings: Sequence[Finding],
    now: float,
) -> str:
    """Set a followed incident's targets, diagnosis and action; return the episode's.

    The episode's action is what a sweep of the job's remaining ranks does
    after the grace: the incident's own when it kills, the policy's when
    the culprits live on another sidecar (which kills them), else observe.
    """
    policy = state.config.policy
    stalled = {
        f.key.rank
        for f in findings
        if f.key.job_id == incident.job_id and f.verdict in HANG_VERDICTS
    }
    targets, why = plan_targets(diag, served, stalled, state.config.culprits)
    incident.targets = targets
    incident.diagnosis = diag.to_record()
    decide(incident, policy, state.budget, now)
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
    if policy.dry_run:
        return Action.OBSERVE
    if is_destructive(incident.action):
        return incident.action
    action = policy.for_verdict(incident.verdict)
    remote_culprits = diag.conclusive and not targets
    return action if remote_culprits and is_destructive(action) else Action.OBSERVE


def stacks_read(state: HangState, read: StacksRead) -> list[Effect]:
    """A followed incident's stacks are in: where the culprits are stuck, then act."""
    incident, episode = read.incident, read.episode
    stacks: dict[str, object] = {}
    where: dict[int, str] = {}
    for rank, rec in read.records:
        stacks[str(rank)] = rec
        if rec.get("where"):
            where[rank] = str(rec["where"])
    # Only culprits get a "stuck at": a waiting rank's stack is evidence, not a cause.
    diag = episode.diagnosis
    where = {r: p for r, p in where.items() if r in diag.culprits}
    diag = diag.with_where(where)
    episode.diagnosis = diag
    episode.where.update(where)
    if episode.remote_id and where:
        state.found = {episode.remote_id: {**state.found.get(episode.remote_id, {}), **where}}
    incident.diagnosis = {
        **(incident.diagnosis or {}),
        **diag.to_record(),
        "stacks": stacks,
        # How long reading the stacks held the incident (and the kill) back.
        "stacks_s": read.seconds,
    }
    return [Publish.of(incident), ExecuteAction(incident)]


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
