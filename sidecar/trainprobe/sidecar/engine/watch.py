"""Watching a suspect job: evidence every round, the verdict at once, the kill when sure.

Once a job's hang episode opens (:class:`~trainprobe.sidecar.engine.hangs.HangResponder`),
one task per episode samples every rank of the job this sidecar serves
(/proc and stacks, :class:`~trainprobe.sidecar.act.evidence.EvidenceGatherer`),
corrects the culprit analysis with what it saw
(:func:`~trainprobe.sidecar.core.decision.refine`) and asks
:func:`~trainprobe.sidecar.core.decision.judge` whether to act:

- the first round publishes the incident: verdict, culprit, where it is
  stuck, the evidence, and the decision so far (act now, or watch until the
  patience is spent);
- a later round that finds definitive evidence, or the patience spent, acts:
  a ``decision`` record says which evidence decided and why now, then the
  action runs;
- an episode that closes because the job stepped again ends the watch, and
  its stall is recorded in the job's patience history (``auto`` learns).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from trainprobe.sidecar.act.evidence import EvidenceGatherer
from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.act.stacks import StackCollector
from trainprobe.sidecar.core.actions import Action, for_replicas, is_destructive
from trainprobe.sidecar.core.culprit import ALL_IN_FLIGHT, Diagnosis
from trainprobe.sidecar.core.decision import (
    ORPHANING_RULES,
    Judgement,
    judge,
    paused_reason,
    refine,
    suspect_line,
)
from trainprobe.sidecar.core.episodes import Episode, plan_targets
from trainprobe.sidecar.core.evidence import definitive_reason
from trainprobe.sidecar.core.incidents import Incident
from trainprobe.sidecar.core.jobview import analyze_job
from trainprobe.sidecar.core.model import WorkerKey, WorkerState
from trainprobe.sidecar.core.patience import PatienceBook
from trainprobe.sidecar.core.policy import ActionPolicy, KillBudget, decide
from trainprobe.sidecar.core.replicas import apply_replicas, replica_evidence
from trainprobe.sidecar.engine.hangs import MAX_INSPECTED, HangResponder
from trainprobe.sidecar.engine.pause import close_paused, judge_pause

__all__ = ["ROUND_S", "HangWatch"]

log = logging.getLogger("trainprobe.sidecar")
#: Seconds between evidence rounds: CPU and I/O progress are measured over it.
ROUND_S = 1.0
#: After the first three rounds, stacks are read every this many rounds (/proc every round).
STACK_EVERY = 5


class HangWatch:
    """Runs the watch of each open episode; decisions are the core's."""

    def __init__(
        self,
        hangs: HangResponder,
        policy: ActionPolicy,
        budget: KillBudget,
        patience: PatienceBook,
        incident_log: IncidentLog,
        publish: Callable[[Incident], None],
        execute: Callable[[Incident], Awaitable[None]],
        stacks: StackCollector | None,
        clock: Callable[[], float] = time.monotonic,
        round_s: float = ROUND_S,
    ) -> None:
        self.hangs = hangs
        self.policy = policy
        self.budget = budget
        self.patience = patience
        self.incident_log = incident_log
        self.publish = publish
        self.execute = execute
        self.stacks = stacks
        self._clock = clock
        self.round_s = round_s

    async def watch(self, incident: Incident, ep: Episode) -> None:
        """Watch ``ep`` until it acts or closes. A failed round is logged and the
        next one runs: a watch that died would leave a real hang unkilled."""
        # The stack signal only where the action could act (issue 13: a dry run
        # or an observe verdict signals nothing at all).
        planned = self.policy.for_verdict(incident.verdict)
        signals = not self.policy.dry_run and is_destructive(planned)
        gatherer = EvidenceGatherer(self.stacks, self._clock, signals)
        rounds = 0
        while self.hangs.episodes.get(ep.job_id) is ep and not ep.acted:
            try:
                if await self._round(incident, ep, gatherer, rounds):
                    return
            except Exception:
                log.exception(
                    "incident %s: evidence round failed; next round in %gs",
                    incident.id,
                    self.round_s,
                )
            rounds += 1
            await asyncio.sleep(self.round_s)

    async def _round(
        self, incident: Incident, ep: Episode, gatherer: EvidenceGatherer, rounds: int
    ) -> bool:
        """One evidence round; True once it acted (or the episode closed)."""
        episodes = self.hangs.episodes
        published = ep.published
        states = self._states(ep)
        # Stacks every round at first (the culprit, then "same frames?"), then
        # every STACK_EVERY rounds: each read costs the rank's reporter a dump.
        stacks = rounds < 3 or rounds % STACK_EVERY == 0
        # A conclusive analysis of collectives needs only the culprits' stacks
        # (where they are); otherwise every rank's decides who waits.
        diag0 = ep.diagnosis
        only = set(diag0.culprits) if diag0.conclusive and diag0.kind != ALL_IN_FLIGHT else None
        # The Flight Recorder of the culprits; of every rank when none is named
        # (all in flight: the collective itself is the suspect).
        fr_ranks = set(diag0.culprits) or {w.hello.rank for w in states}
        evidence = await gatherer.round(states, stacks, only, fr_ranks)
        now = self._clock()
        if episodes.get(ep.job_id) is not ep:
            # The job stepped again while we sampled. The verdict still happened:
            # publish it (once), so a short hang is seen too, not silently lost.
            if not published:
                patience_s, basis = self.patience.patience_s(ep.job_id)
                why = "the job stepped again before the first evidence round ended"
                j = Judgement(False, "resumed", why, False, patience_s, basis, ep.onset_at, now)
                self._fill(incident, ep.diagnosis, j, gatherer, states)
                ep.published = True
                self.publish(incident)
            return True
        summaries = self.hangs.summaries(ep.job_id, now)
        reason = paused_reason(evidence, summaries)
        paused = judge_pause(
            ep,
            incident.id,
            evidence,
            reason,
            now,
            self.patience,
            self.hangs.registry,
            self.incident_log,
        )
        if paused is not None:
            if not ep.published:
                self._fill(incident, ep.diagnosis, paused, gatherer, states)
                incident.targets, incident.action = [], Action.OBSERVE
                incident.action_reason = f"paused: {paused.why}"
                ep.published = True
                self.publish(incident)
            return ep.resumed_at is not None
        dead = {r for r, ev in evidence.items() if definitive_reason(ev)}
        # A replicated job: after the stacks, a waiting replica is still never a culprit.
        diag = apply_replicas(summaries, refine(analyze_job(summaries), evidence), dead)
        where = {r: ev.where for r, ev in evidence.items() if r in diag.culprits and ev.where}
        diag = diag.with_where(where)
        patience_s, basis = self._patience(ep.job_id, diag, now)
        j = judge(diag, evidence, ep.onset_at, patience_s, basis, now)
        action = self.policy.for_verdict(incident.verdict)
        if not j.act and not is_destructive(action):
            # The patience guards kills only: a dump or an observation costs nothing.
            why = f"on_{incident.verdict.value.lower()}={action} kills nothing: done at the verdict"
            j = replace(j, act=True, rule="not_destructive", why=why)
        ep.diagnosis, ep.where = diag, {**ep.where, **where}
        ep.decision = j.to_record()
        ep.suspect = suspect_line(diag, evidence, j, now)
        first = diag.culprits[0] if diag.culprits else None
        ep.activity = evidence[first].label if first in evidence else ""
        if not published or j.act:
            self._fill(incident, diag, j, gatherer, states)
        if not published:
            ep.published = True
            if not j.act:
                log.warning("incident %s: %s", incident.id, ep.suspect)
            self.publish(incident)
        if j.act:
            await self._act(incident, ep, j, now)
            return True
        return False

    def _patience(self, job_id: str, diag: Diagnosis, now: float) -> tuple[float, str]:
        """The job's patience: a replicated job's (short, backed off per place) or today's."""
        rep = replica_evidence(diag.evidence)
        if rep is None or not rep.culprits:
            return self.patience.patience_s(job_id)
        return self.patience.replica_patience_s(job_id, _place(diag, rep.culprits), now)

    def _states(self, ep: Episode) -> list[WorkerState]:
        """The job's ranks this sidecar serves: culprits first, at most MAX_INSPECTED."""
        served = {
            w.hello.rank: w
            for w in self.hangs.registry
            if w.hello.job_id == ep.job_id
            and ep.pids.get(w.hello.rank, w.hello.pid) == w.hello.pid
            and w.ended != "goodbye"
        }  # a rank that vanished before the episode is sampled too: /proc says it is gone
        first = [r for r in ep.diagnosis.culprits if r in served]
        order = first + sorted(r for r in served if r not in first)
        return [served[r] for r in order][:MAX_INSPECTED]

    def _fill(
        self,
        incident: Incident,
        diag: Diagnosis,
        j: Judgement,
        gatherer: EvidenceGatherer,
        states: list[WorkerState],
    ) -> None:
        """Targets, diagnosis, stacks and decision into the incident."""
        served = {w.hello.rank: w for w in states if not w.killed_by_us}
        stalled = set(incident.ranks)
        targets, why = plan_targets(diag, served, stalled, self.hangs.episodes.policy)
        incident.targets = targets
        show = set(targets) | set(diag.culprits)
        incident.diagnosis = {
            **(incident.diagnosis or {}),
            **diag.to_record(),
            "stacks": {str(r): rec for r, rec in gatherer.records.items() if r in show},
            "stacks_s": gatherer.stacks_s,
        }
        incident.decision = j.to_record()
        rep = replica_evidence(diag.evidence)
        action = for_replicas(self.policy.for_verdict(incident.verdict), _evicting(diag))
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
        incident.dry_run = self.policy.dry_run

    async def _act(self, incident: Incident, ep: Episode, j: Judgement, now: float) -> None:
        decide(incident, self.policy, self.budget, now)
        evicting = _evicting(ep.diagnosis)
        incident.action = for_replicas(incident.action, evicting)
        incident.action_reason += f"; decided by {j.rule}: {j.why}"
        episodes = self.hangs.episodes
        destructive = is_destructive(incident.action) and not incident.dry_run
        sweep = incident.action if destructive else Action.OBSERVE
        if incident.action == Action.EVICT:
            # The other replicas go on: nothing of the job is swept after the grace.
            sweep = Action.OBSERVE
            rep = replica_evidence(ep.diagnosis.evidence)
            if rep is not None and destructive:
                self.patience.record_eviction(ep.job_id, _place(ep.diagnosis, rep.culprits), now)
        wanted = self.policy.for_verdict(incident.verdict)
        if (
            not self.policy.dry_run
            and not evicting
            and ep.diagnosis.conclusive
            and not incident.targets
            and is_destructive(wanted)
        ):
            # The culprits live on another sidecar, which kills them: the ranks
            # here are swept after the grace all the same (as before issue 12).
            sweep = wanted
        grace_s = None
        if j.rule in ORPHANING_RULES and is_destructive(sweep):
            grace_s = 0.0
            incident.action_reason += (
                "; the culprit is already over: its peers wait on a collective that can never "
                "complete, so the job's other ranks are ended now (no job_kill_grace_s)"
            )
        episodes.arm_sweep(ep, sweep, now, grace_s)
        for rank in incident.targets if destructive else ():
            w = self.hangs.registry.get(WorkerKey(ep.job_id, rank))
            if w is not None:
                w.killed_rule, w.killed_incident = j.rule, incident.id
                w.evicted = incident.action == Action.EVICT
        record = {
            "type": "decision",
            "incident_id": incident.id,
            "job_id": incident.job_id,
            "targets": incident.targets,
            "action": str(incident.action),
            # What the policy made of the decision (dry run, kill budget, no target here).
            "action_reason": incident.action_reason,
            "detected_after_s": round(incident.detected_at - ep.onset_at, 3),
            "decided_after_s": round(now - ep.onset_at, 3),
            **j.to_record(),
        }
        self.incident_log.write(record)
        log.warning(
            "incident %s: %s ranks %s (%s, %.1fs after onset): %s",
            incident.id,
            incident.action,
            incident.targets,
            j.rule,
            now - ep.onset_at,
            j.why,
        )
        await self.execute(incident)

    def closed(self, ep: Episode, now: float) -> None:
        """An episode closed: if nobody acted, its stall ended by itself; remember it."""
        if close_paused(ep, now, self.incident_log):
            return  # a pause is no stall: nothing goes into the job's patience history
        if ep.acted or ep.remote_id or ep.incident is None:
            return
        stepped = any(
            w.hello.job_id == ep.job_id and not w.ended and w.last_step_at > ep.opened_at
            for w in self.hangs.registry
        )
        if not stepped:
            return  # its ranks exited (or were replaced): not a stall that ended by itself
        length = now - ep.onset_at
        culprit = ep.diagnosis.culprits[0] if ep.diagnosis.culprits else None
        where = ep.where.get(culprit, "") if culprit is not None else ""
        self.patience.record(ep.job_id, length, where, ep.activity, now)
        self.incident_log.write(
            {
                "type": "decision",
                "incident_id": ep.id,
                "job_id": ep.job_id,
                "act": False,
                "rule": "resumed",
                "why": f"the stall ended by itself after {length:.1f}s: nothing was killed",
                "stalled_s": round(length, 3),
                "where": where,
                "activity": ep.activity,
                "patience_s": self.patience.patience_s(ep.job_id)[0],
            }
        )
        log.info("job %s: stall of %.1fs ended by itself (%s)", ep.job_id, length, where or "?")


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
