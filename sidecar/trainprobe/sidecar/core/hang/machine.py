"""A job's hang as one state machine: plain data in, effects out.

:func:`step` is the whole life of a hang, for every job at once:

- **verdicts**: each session's worst finding (or OK), as :class:`SetVerdict`;
- **open**: new findings are edge-triggered and grouped into incidents; the
  first HUNG/UNRESPONSIVE incident of a job is diagnosed over every rank of
  the job and opens its episode, watched round by round (:class:`Watch`);
  later incidents of the job are ``incident_update`` records of the episode;
  any other incident is decided by the policy and published at once;
- **follow**: another sidecar's episode (Ray coordinator) is acted on for the
  culprits this one serves, after their stacks are read (:class:`Inspect`);
- **decide**: each evidence round (:class:`EvidenceRound`) is judged
  (:mod:`.rounds`): publish at once, act when the evidence is definitive or
  the patience is spent;
- **sweep**: ranks of an episode still there after the grace are killed;
- **settle**: an episode whose processes all exited, were replaced or
  stepped again closes; a stall that ended by itself goes into the job's
  patience history.

``findings`` is a tick's (None when a step only brings evidence between
ticks). ``state`` is changed in place and returned. Nothing here does I/O:
the engine's runner applies the effects, in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainprobe.sidecar.core.hang.effects import (
    Effect,
    Evidence,
    EvidenceRound,
    ExecuteAction,
    Inspect,
    Log,
    Opened,
    Publish,
    Record,
    SetVerdict,
    Sweep,
    Watch,
    kill_decided,
    signals_for,
)
from trainprobe.sidecar.core.hang.episodes import Episode, late_stalled
from trainprobe.sidecar.core.hang.follow import follow, served, stacks_read
from trainprobe.sidecar.core.hang.records import IncidentUpdate, PauseEnded, StallEnded
from trainprobe.sidecar.core.hang.rounds import START_UP_RULES, judge_round, patience_for
from trainprobe.sidecar.core.hang.state import HangState, VerdictOf, job_verdict, summaries
from trainprobe.sidecar.core.incident.actions import Action, is_destructive
from trainprobe.sidecar.core.incident.incidents import Incident, group_incidents
from trainprobe.sidecar.core.incident.policy import decide
from trainprobe.sidecar.core.job.view import analyze_job
from trainprobe.sidecar.core.session.model import Finding, Verdict, WorkerKey, WorkerState

__all__ = ["step"]


def step(
    state: HangState,
    workers: Sequence[WorkerState],
    findings: Sequence[Finding] | None,
    evidence: Sequence[Evidence],
    now: float,
    wall: float = 0.0,
) -> tuple[HangState, list[Effect]]:
    """One step of every job's hang (see the module docstring); ``wall`` is the
    wall-clock time of ``now``, for new incidents."""
    out: list[Effect] = []
    if findings is not None:
        _tick(state, workers, findings, now, wall, out)
    for ev in evidence:
        if isinstance(ev, EvidenceRound):
            out += judge_round(state, ev, workers, now)
        else:
            out += stacks_read(state, ev)
    return state, out


def _tick(
    state: HangState,
    workers: Sequence[WorkerState],
    findings: Sequence[Finding],
    now: float,
    wall: float,
    out: list[Effect],
) -> None:
    cfg = state.config
    verdict_of = _verdicts(state, findings, out)
    fresh = state.edges.new_findings(findings)
    incidents: list[Incident] = []
    states: dict[WorkerKey, WorkerState] = {}
    if fresh:
        states = {w.key: w for w in workers}
        incidents = group_incidents(fresh, states, now, wall)
    routing = state.episodes.route(incidents)
    for incident in routing.plain:
        decide(incident, cfg.policy, state.budget, now)
        _dispatch(state, incident, out)
        out.append(Opened(incident))
    for incident in routing.openers:
        # Detect fast, act when sure: the watch publishes, then acts on evidence.
        ep = _open(state, incident, workers, now, verdict_of)
        out.append(Watch(ep, incident, 0, 0.0, signals_for(cfg, incident)))
        out.append(Opened(incident))
    for episode_id, incident, expected in routing.updates:  # after openers: theirs too
        update = IncidentUpdate(episode_id, incident, expected)
        into = state.episodes.get(incident.job_id)
        if into is not None and into.id == episode_id and into.leader and not into.published:
            into.held_updates.append(update)  # written once its incident is (core/hang/rounds.py)
        else:
            out.append(Record(update))
        _late_stalled(state, incident, states, out)
    for incident, inspect, ep in follow(state, workers, findings, now, wall, verdict_of, out):
        _dispatch(state, incident, out, inspect, ep)
        out.append(Opened(incident))
    for ep in state.episodes.due_sweeps(now):
        by_rank = {w.hello.rank: w for w in workers if w.hello.job_id == ep.job_id}
        ranks = state.episodes.remaining(ep, by_rank, verdict_of)
        if not ranks:
            continue
        out.append(
            Log.warning(
                "job %s: ranks %s still there in hang episode %s (%s): %s",
                ep.job_id,
                ranks,
                ep.id,
                ep.sweep_phase,
                ep.action,
            )
        )
        out += kill_decided(cfg, ep.job_id, ranks, ep.action)
        out.append(Sweep(ep.id, ep.job_id, tuple(ranks), ep.action, ep.incident, ep.sweep_phase))
    for ep in _settle(state, workers, verdict_of):
        _closed(state, ep, workers, now, out)
        state.episode_closed(ep)
        out.append(Log.info("job %s: hang episode %s is over", ep.job_id, ep.id))


def _verdicts(state: HangState, findings: Sequence[Finding], out: list[Effect]) -> VerdictOf:
    """Each session's verdict: its worst finding's, else OK.

    Most sessions are and stay OK: only those with a finding now, or with one
    until now (``state.flagged``), get a :class:`SetVerdict`. Returns each
    session's verdict as of this step, which the effects are yet to set.
    """
    worst: dict[WorkerKey, Finding] = {}
    for f in findings:
        cur = worst.get(f.key)
        if cur is None or f.verdict.severity > cur.verdict.severity:
            worst[f.key] = f
    flagged = state.flagged
    if flagged:
        for key in [k for k in flagged if k not in worst]:
            del flagged[key]
            out.append(SetVerdict(key, Verdict.OK, ""))
    for key, hit in worst.items():
        out.append(SetVerdict(key, hit.verdict, hit.rule))
        flagged[key] = None

    def verdict_of(w: WorkerState) -> Verdict:
        hit = worst.get(w.key)
        return hit.verdict if hit is not None else Verdict.OK

    return verdict_of


def _dispatch(
    state: HangState,
    incident: Incident,
    out: list[Effect],
    inspect: list[WorkerState] | None = None,
    episode: Episode | None = None,
) -> None:
    if not incident.dry_run:
        out += kill_decided(state.config, incident.job_id, incident.targets, incident.action)
    if inspect and episode is not None and state.config.reads_stacks:
        # Stacks first: the incident (and its span) says where the culprit is stuck.
        signals = not incident.dry_run and is_destructive(incident.action)
        out.append(Inspect(incident, episode, tuple(inspect), signals))
    else:
        out.append(Publish.of(incident))
        out.append(ExecuteAction(incident))


def _late_stalled(
    state: HangState, incident: Incident, states: dict[WorkerKey, WorkerState], out: list[Effect]
) -> None:
    """Ranks that joined an inconclusive stall a tick late are killed now."""
    ep = state.episodes.get(incident.job_id)
    if ep is None or state.config.policy.dry_run:
        return
    late = late_stalled(ep, incident, state.config.culprits)
    ranks = [
        r
        for r in late
        if (w := states.get(WorkerKey(incident.job_id, r))) is not None and not w.killed_by_us
    ]
    if ranks:
        out += kill_decided(state.config, ep.job_id, ranks, ep.action)
        out.append(Sweep(ep.id, ep.job_id, tuple(ranks), ep.action, ep.incident, "stalled_later"))


def _open(
    state: HangState,
    incident: Incident,
    workers: Sequence[WorkerState],
    now: float,
    verdict_of: VerdictOf,
) -> Episode:
    """Diagnose the job of a first hang incident and open its episode.

    Nothing is decided yet: the episode's watch gathers evidence, publishes
    the incident and acts when the evidence is definitive or the patience is
    spent. Until then the episode observes.
    """
    ranks = summaries(state, workers, incident.job_id, now, verdict_of)
    diag = analyze_job(ranks, job_verdict(state, incident.job_id))
    mine = served(incident.job_id, workers)
    incident.diagnosis = diag.to_record()
    pids = {r: w.hello.pid for r, w in mine.items() if not w.ended}
    ep = state.episodes.open(
        incident.job_id, incident.id, diag, pids, Action.OBSERVE, now, incident
    )
    ep.onset_at = incident.onset_at
    return ep


def _settle(
    state: HangState, workers: Sequence[WorkerState], verdict_of: VerdictOf
) -> list[Episode]:
    if not len(state.episodes):
        return []  # every tick asks; most ticks have no open episode
    # Only the jobs with an open episode: the others' ranks are not looked at.
    by_job: dict[str, dict[int, WorkerState]] = {}
    is_open = state.episodes.get
    for w in workers:
        job = w.hello.job_id
        if is_open(job) is not None:
            by_job.setdefault(job, {})[w.hello.rank] = w
    return state.episodes.settle(by_job, verdict_of)


def _closed(
    state: HangState, ep: Episode, workers: Sequence[WorkerState], now: float, out: list[Effect]
) -> None:
    """An episode closed: if nobody acted, its stall ended by itself; remember it."""
    if ep.paused_at is not None:
        # It may close before a round saw the ranks run (they stepped first):
        # its pause then ends now. A pause is no stall: no patience history.
        resumed_at = ep.resumed_at if ep.resumed_at is not None else now
        out.append(Record(PauseEnded(ep.id, ep.job_id, resumed_at - ep.paused_at)))
        out.append(
            Log.info("job %s: resumed after a pause of %.1fs", ep.job_id, resumed_at - ep.paused_at)
        )
        return
    if ep.acted or ep.remote_id or ep.incident is None:
        return
    if ep.incident.rule in START_UP_RULES:
        return  # a start-up wait (a download at a barrier) says nothing of a step's stalls
    stepped = any(
        w.hello.job_id == ep.job_id and not w.ended and w.last_step_at > ep.opened_at
        for w in workers
    )
    if not stepped:
        return  # its ranks exited (or were replaced): not a stall that ended by itself
    length = now - ep.onset_at
    culprit = ep.diagnosis.culprits[0] if ep.diagnosis.culprits else None
    where = ep.where.get(culprit, "") if culprit is not None else ""
    state.patience.record(ep.job_id, length, where, ep.activity, now)
    # The patience that now governs the job: a replicated job's, where it is one.
    patience_s = patience_for(state, ep.job_id, ep.diagnosis, now)[0]
    out.append(Record(StallEnded(ep.id, ep.job_id, length, where, ep.activity, patience_s)))
    out.append(
        Log.info("job %s: stall of %.1fs ended by itself (%s)", ep.job_id, length, where or "?")
    )
