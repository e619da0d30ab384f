"""A watched hang's evidence round, judged: publish at once, act when sure.

Each round of an open episode (/proc and stacks of the job's ranks served
here, sampled by the engine) comes back as an
:class:`~trainprobe.sidecar.core.hang.effects.EvidenceRound`. Here it corrects the
culprit analysis (:func:`~trainprobe.sidecar.core.judge.decision.refine`) and asks
:func:`~trainprobe.sidecar.core.judge.decision.judge` whether to act:

- the first round publishes the incident: verdict, culprit, where it is
  stuck, the evidence, and the decision so far (act now, or watch until the
  patience is spent);
- a later round that finds definitive evidence, or the patience spent, acts:
  a ``decision`` record says which evidence decided and why now, then the
  action runs;
- a paused job (every live rank held: :func:`~.pause.pause_check`) is
  no hang: a ``paused`` decision once, no kill, and its clocks restart at
  the resume.

Every outcome is an effect; nothing here writes, signals or sleeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trainprobe.sidecar.core.hang.effects import (
    Effect,
    EvidenceRound,
    ExecuteAction,
    Log,
    MarkKill,
    Publish,
    Record,
    Watch,
    kill_decided,
    signals_for,
)
from trainprobe.sidecar.core.hang.episodes import Episode, plan_targets
from trainprobe.sidecar.core.hang.pause import (
    REMOTE_WORD_MARGIN_S,
    every_rank,
    judge_pause,
    pause_check,
)
from trainprobe.sidecar.core.hang.records import ActDecision
from trainprobe.sidecar.core.hang.state import HangConfig, HangState, job_verdict, summaries
from trainprobe.sidecar.core.incident.actions import Action, for_replicas, is_destructive
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.incident.policy import decide
from trainprobe.sidecar.core.job.digest import DETAIL_WAIT_S
from trainprobe.sidecar.core.job.view import analyze_job
from trainprobe.sidecar.core.judge.culprit import Diagnosis
from trainprobe.sidecar.core.judge.decision import (
    ORPHANING_RULES,
    Judgement,
    judge,
    refine,
    stuck_sweep_s,
    suspect_line,
)
from trainprobe.sidecar.core.judge.evidence import definitive_reason
from trainprobe.sidecar.core.judge.replicas import apply_replicas, culprit_onset, replica_evidence
from trainprobe.sidecar.core.session.model import WorkerState

__all__ = ["START_UP_RULES", "judge_round", "patience_for"]

#: Rules of a rank before its first step, past its process group: their kill
#: keeps the start-up patience (:func:`patience_for`).
START_UP_RULES = frozenset({"startup", "startup_straggler"})


def judge_round(
    state: HangState, rnd: EvidenceRound, workers: Sequence[WorkerState], now: float
) -> list[Effect]:
    """The effects of one evidence round; a :class:`Watch` among them continues it."""
    cfg, ep, incident = state.config, rnd.episode, rnd.incident
    out: list[Effect] = []
    published = ep.published
    if state.episodes.get(ep.job_id) is not ep:
        # The job stepped again while we sampled. The verdict still happened:
        # publish it (once), so a short hang is seen too, not silently lost.
        if not published:
            patience_s, basis = state.patience.patience_s(ep.job_id)
            why = "the job stepped again before the first evidence round ended"
            j = Judgement(False, "resumed", why, False, patience_s, basis, ep.onset_at, now)
            _fill(state, incident, ep.diagnosis, j, rnd)
            out += _publish(ep, incident)
        return out
    view = state.job_view
    if view is not None and view.awaiting(ep.job_id) and now - ep.opened_at < DETAIL_WAIT_S:
        # Only the digest of the other nodes is here (a healthy job needs no
        # more): this node's ranks alone would make a pause or a culprit of
        # them. The next sync brings them (an open episode asks).
        out.append(_next(cfg, rnd))
        return out
    ranks = summaries(state, workers, ep.job_id, now)
    wait_s = cfg.rules.heartbeat_timeout_s + REMOTE_WORD_MARGIN_S
    seen, awaiting = every_rank(rnd, workers, ranks, now, wait_s)
    reason, hinges = pause_check(seen, ranks, awaiting)
    if hinges and ep.paused_at is not None:
        out.append(_next(cfg, rnd))  # still paused until the word says otherwise
        return out
    paused = judge_pause(state, ep, incident.id, rnd.evidence, reason, now, out)
    if paused is not None:
        if not ep.published:
            _fill(state, incident, ep.diagnosis, paused, rnd)
            incident.targets, incident.action = [], Action.OBSERVE
            incident.action_reason = f"paused: {paused.why}"
            out += _publish(ep, incident)
        if ep.resumed_at is None:
            out.append(_next(cfg, rnd))
        return out
    evidence = {r: seen.get(r, ev) for r, ev in rnd.evidence.items()}  # superseded marked
    dead = {r for r, ev in evidence.items() if definitive_reason(ev)}
    # A replicated job: after the stacks, a waiting replica is still never a culprit.
    base = analyze_job(ranks, job_verdict(state, ep.job_id))
    diag = apply_replicas(ranks, refine(base, seen, awaiting), dead)
    where = {r: ev.where for r, ev in evidence.items() if r in diag.culprits and ev.where}
    diag = diag.with_where(where)
    patience_s, basis = patience_for(state, ep.job_id, diag, now, incident.rule)
    j = judge(diag, evidence, culprit_onset(ranks, diag, ep.onset_at, now), patience_s, basis, now)
    # Every other live rank held: even a definitive kill waits for the word
    # that may make it a pause (a job stopped on two nodes, one node's word first).
    if j.act and awaiting and (not j.definitive or hinges):
        pending = hinges or awaiting
        why = f"{j.why}; waiting for the relay node's word on ranks {pending} (held or not)"
        j = replace(j, act=False, rule="", why=why)
    action = cfg.policy.for_verdict(incident.verdict)
    if not j.act and not is_destructive(action):
        # The patience guards kills only: a dump or an observation costs nothing.
        why = f"on_{incident.verdict.value.lower()}={action} kills nothing: done at the verdict"
        j = replace(j, act=True, rule="not_destructive", why=why)
    ep.diagnosis, ep.where = diag, {**ep.where, **where}
    ep.decision = j.to_record()
    ep.suspect = suspect_line(diag, evidence, j, now)
    first = diag.culprits[0] if diag.culprits else None
    ep.activity = evidence[first].label if first is not None and first in evidence else ""
    if not published or j.act:
        _fill(state, incident, diag, j, rnd)
    if not published:
        if not j.act:
            out.append(Log.warning("incident %s: %s", incident.id, ep.suspect))
        out += _publish(ep, incident)
    if j.act:
        out += _act(state, incident, ep, j, now, stuck_sweep_s(diag, j, ranks, now))
    else:
        out.append(_next(cfg, rnd, j.onset_at + j.patience_s - now))
    return out


def _publish(ep: Episode, incident: Incident) -> list[Effect]:
    """The episode's incident, then the updates folded in before it."""
    ep.published = True
    held, ep.held_updates = ep.held_updates, []
    return [Publish.of(incident), *(Record(u) for u in held)]


def _next(cfg: HangConfig, rnd: EvidenceRound, patience_left_s: float = 0.0) -> Watch:
    """The next round, in ``round_s``; sooner when the patience is spent before
    then, so the kill comes when it is spent, not up to a round later."""
    delay_s = patience_left_s if 0.0 < patience_left_s < cfg.round_s else cfg.round_s
    return Watch(rnd.episode, rnd.incident, rnd.round + 1, delay_s, signals_for(cfg, rnd.incident))


def patience_for(
    state: HangState, job_id: str, diag: Diagnosis, now: float, rule: str = ""
) -> tuple[float, str]:
    """The job's patience: a replicated job's (short, backed off per place) or
    today's; a start-up hang's (``rule``) never less than ``startup_timeout_s``,
    since a healthy start waits that long (one rank downloads, its peers sit in
    a barrier). It counts from the incident's onset: the rank's connect for rule
    ``startup``, its peers' wait for ``startup_straggler``."""
    rep = replica_evidence(diag.evidence)
    if rep is None or not rep.culprits:
        patience_s, basis = state.patience.patience_s(job_id)
    else:
        patience_s, basis = state.patience.replica_patience_s(
            job_id, _place(diag, rep.culprits), now
        )
    start_s = state.config.rules.stall.startup_timeout_s
    if rule in START_UP_RULES and patience_s < start_s:
        return start_s, f"start-up: startup_timeout_s ({basis}: {patience_s:.0f}s)"
    return patience_s, basis


def _fill(
    state: HangState, incident: Incident, diag: Diagnosis, j: Judgement, rnd: EvidenceRound
) -> None:
    """Targets, diagnosis, stacks and decision into the incident."""
    policy = state.config.policy
    served = {w.hello.rank: w for w in rnd.states if not w.killed_by_us}
    stalled = set(incident.ranks)
    targets, why = plan_targets(diag, served, stalled, state.config.culprits)
    incident.targets = targets
    show = set(targets) | set(diag.culprits)
    incident.diagnosis = {
        **(incident.diagnosis or {}),
        **diag.to_record(),
        "stacks": {str(r): rec for r, rec in rnd.stacks.items() if r in show},
        "stacks_s": rnd.stacks_s,
    }
    incident.decision = j.to_record()
    rep = replica_evidence(diag.evidence)
    action = for_replicas(policy.for_verdict(incident.verdict), _evicting(diag))
    if action == Action.EVICT and rep is not None:
        incident.diagnosis["eviction"] = {
            "replicas": list(rep.culprits),
            "replicas_left": rep.survivors,
        }
    when = "now" if j.act else f"after {j.patience_s:.0f}s patience unless the job resumes"
    reason = f"on_{incident.verdict.value.lower()}={action} {when}; {why}"
    if is_destructive(action) and not targets:
        # The culprits live on another sidecar, which kills them: as decide() says.
        action, reason = Action.OBSERVE, f"{reason}; no rank of this sidecar is a target"
    incident.action = action
    incident.action_reason = reason
    incident.dry_run = policy.dry_run


def _act(
    state: HangState,
    incident: Incident,
    ep: Episode,
    j: Judgement,
    now: float,
    stuck_s: float | None = None,
) -> list[Effect]:
    policy = state.config.policy
    decide(incident, policy, state.budget, now)
    evicting = _evicting(ep.diagnosis)
    incident.action = for_replicas(incident.action, evicting)
    incident.action_reason += f"; decided by {j.rule}: {j.why}"
    destructive = is_destructive(incident.action) and not incident.dry_run
    sweep = incident.action if destructive else Action.OBSERVE
    if incident.action == Action.EVICT:
        # The other replicas go on: nothing of the job is swept after the grace.
        sweep = Action.OBSERVE
        rep = replica_evidence(ep.diagnosis.evidence)
        if rep is not None and destructive:
            state.patience.record_eviction(ep.job_id, _place(ep.diagnosis, rep.culprits), now)
    wanted = policy.for_verdict(incident.verdict)
    if (
        not policy.dry_run
        and not evicting
        and ep.diagnosis.conclusive
        and not incident.targets
        and is_destructive(wanted)
    ):
        # The culprits live on another sidecar, which kills them: the ranks
        # here are swept after the grace all the same.
        sweep = wanted
    grace_s, phase = None, ""
    if j.rule in ORPHANING_RULES and is_destructive(sweep):
        grace_s = 0.0
        incident.action_reason += (
            "; the culprit is already over: its peers wait on a collective that can never "
            "complete, so the job's other ranks are ended now (no job_kill_grace_s)"
        )
    elif stuck_s is not None and is_destructive(sweep):
        grace_s = min(stuck_s, state.config.culprits.job_kill_grace_s)
        phase = "stuck_beside_stopped"
        incident.action_reason += (
            f"; ranks {ep.diagnosis.evidence['stuck']} are silent beside it, neither held nor "
            f"waiting: stuck on their own, swept in {grace_s:.0f}s (when their patience is "
            "spent, as without it, or after job_kill_grace_s if sooner)"
        )
    state.episodes.arm_sweep(ep, sweep, now, grace_s, phase)
    evicted = incident.action == Action.EVICT
    out: list[Effect] = [
        MarkKill(ep.job_id, rank, j.rule, incident.id, evicted)
        for rank in (incident.targets if destructive else ())
    ]
    out.append(Record(ActDecision(incident, j, ep.onset_at, now)))
    out.append(
        Log.warning(
            "incident %s: %s ranks %s (%s, %.1fs after onset): %s",
            incident.id,
            incident.action,
            incident.targets,
            j.rule,
            now - ep.onset_at,
            j.why,
        )
    )
    # The health service's trainprobe.workers turns NOT_SERVING at this same decision.
    if not incident.dry_run:
        out += kill_decided(state.config, incident.job_id, incident.targets, incident.action)
    out.append(ExecuteAction(incident))
    return out


def _evicting(diag: Diagnosis) -> bool:
    """A replicated job with a culprit replica: its action is an eviction."""
    rep = replica_evidence(diag.evidence)
    return rep is not None and bool(rep.culprits)


def _place(diag: Diagnosis, replicas: tuple[str, ...]) -> str:
    """Where a culprit replica is stuck (its first culprit's place), else its id."""
    for rank in diag.culprits:
        if diag.where.get(rank):
            return diag.where[rank]
    return "replica " + ",".join(replicas)
