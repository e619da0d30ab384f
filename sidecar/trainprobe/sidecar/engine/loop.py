"""The tick: rules over the registry, then incidents, then actions and exports.

Data flows one way: registry -> rules -> findings -> incidents -> policy ->
(incident log, exporters, actions). Actions run as tasks, so a slow kill
never delays the next tick.

A job's hang is one episode (:mod:`trainprobe.sidecar.core.episodes`): its
first HUNG/UNRESPONSIVE incident is diagnosed over every rank of the job,
targets the culprits, and waits for their stacks before it is logged,
exported and acted on (:class:`~trainprobe.sidecar.engine.hangs.HangResponder`); the
job's later incidents are logged as updates of the episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.core.actions import action_record, is_destructive
from trainprobe.sidecar.core.episodes import (
    CulpritPolicy,
    Episode,
    late_stalled,
    update_record,
)
from trainprobe.sidecar.core.incidents import FindingEdges, Incident, group_incidents
from trainprobe.sidecar.core.jobview import JobView
from trainprobe.sidecar.core.model import Finding, Verdict, WorkerKey, WorkerState
from trainprobe.sidecar.core.patience import PatienceBook
from trainprobe.sidecar.core.policy import ActionPolicy, KillBudget, decide
from trainprobe.sidecar.core.registry import Registry
from trainprobe.sidecar.core.rules import RuleConfig, evaluate, job_contexts
from trainprobe.sidecar.engine.hangs import HangResponder, StackSource
from trainprobe.sidecar.engine.watch import HangWatch
from trainprobe.sidecar.tasks import TaskSet

__all__ = ["ActionRunner", "Engine", "IncidentSink"]

log = logging.getLogger("trainprobe.sidecar")

#: A gap between ticks of more than this many intervals (and FREEZE_MIN_S) is
#: a freeze of our own loop. Not lower: a loop that is merely slow, tick after
#: tick, would be gated forever and judge nobody; shorter lags are covered by
#: judging ages as of each report's send (rules.py).
FREEZE_TICKS = 10
FREEZE_MIN_S = 1.0


class IncidentSink(Protocol):
    """Something that hears about incidents and findings (exporters)."""

    def on_incident(self, incident: Incident) -> None: ...


class ActionRunner(Protocol):
    async def execute(self, incident: Incident) -> None: ...

    async def sweep(
        self,
        episode_id: str,
        job_id: str,
        ranks: list[int],
        action: str,
        incident: Incident | None = None,
        phase: str = "job_kill_grace",
    ) -> None: ...


class Engine:
    """Evaluates the rules every tick and dispatches what they find."""

    def __init__(
        self,
        registry: Registry,
        rules: RuleConfig,
        policy: ActionPolicy,
        incident_log: IncidentLog,
        actions: ActionRunner,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        culprits: CulpritPolicy | None = None,
        stacks: StackSource | None = None,
        job_view: JobView | None = None,
        sidecar_id: str = "",
        patience: PatienceBook | None = None,
    ) -> None:
        self.registry = registry
        self.rules = rules
        self.policy = policy
        self.incident_log = incident_log
        self.actions = actions
        self.sinks: list[IncidentSink] = []
        self.episodes = FindingEdges()
        self.budget = KillBudget(policy.max_kills_per_hour)
        self.hangs = HangResponder(
            registry,
            rules,
            policy,
            self.budget,
            culprits,
            stacks,
            job_view,
            sidecar_id,
            clock,
            wall_clock,
        )
        self.watch = HangWatch(
            self.hangs,
            policy,
            self.budget,
            patience or PatienceBook(),
            incident_log,
            self._publish,
            self._execute_decided,
            stacks,  # type: ignore[arg-type]
            clock,
        )
        self._clock = clock
        self._wall = wall_clock
        self._tasks = TaskSet()
        self.ticks = 0
        #: When the last tick completed (clock time; None before the first):
        #: the health service's proof that the rules run.
        self.last_tick_at: float | None = None
        #: Told of every session this sidecar decides to kill or restart, at the
        #: moment of the decision (before stacks are read and the kill starts):
        #: the health service's ``trainprobe.workers`` answer.
        self.kill_listeners: list[Callable[[WorkerState], None]] = []
        #: A tick gap beyond this means our loop was frozen or starved (SIGSTOP,
        #: a CPU hog, a stalled VM); run() derives it from the tick interval.
        self.freeze_after_s = FREEZE_MIN_S
        self.freezes = 0
        self._last_tick_at: float | None = None
        #: Sessions whose verdict is not OK (see _set_verdicts).
        self._flagged: dict[WorkerKey, WorkerState] = {}

    def tick(self) -> list[Incident]:
        """One evaluation pass; returns the incidents it opened."""
        now = self._clock()
        self.ticks += 1
        self._watch_own_clock(now)
        gone = self.registry.forget_stale(now)
        self.registry.arrivals.sweep(now)
        workers = self.registry.workers()
        if gone:
            self._forget_ended_jobs(gone, workers)
        findings = evaluate(workers, self.rules, now)
        self._set_verdicts(findings)
        fresh = self.episodes.new_findings(findings)
        incidents = []
        states: dict[WorkerKey, WorkerState] = {}
        if fresh:
            states = {w.key: w for w in workers}
            incidents = group_incidents(fresh, states, now, self._wall())
        routing = self.hangs.episodes.route(incidents)
        for episode_id, incident, expected in routing.updates:
            self.incident_log.write(update_record(episode_id, incident, expected))
            self._kill_late_stalled(incident, states)
        for incident in routing.plain:
            decide(incident, self.policy, self.budget, now)
            self._dispatch(incident)
        opened = [*routing.plain]
        for incident in routing.openers:
            # Detect fast, act when sure: the watch publishes, then acts on evidence.
            incident, _, ep = self.hangs.open(incident, workers, findings, now)
            self._spawn(self.watch.watch(incident, ep), incident)
            opened.append(incident)
        for incident, inspect, ep in self.hangs.follow(workers, findings, now):
            self._dispatch(incident, inspect, ep)
            opened.append(incident)
        for ep, ranks in self.hangs.due_sweeps(workers, now):
            log.warning(
                "job %s: ranks %s still there in hang episode %s (%s): %s",
                ep.job_id,
                ranks,
                ep.id,
                ep.sweep_phase,
                ep.action,
            )
            sweep = self.actions.sweep(
                ep.id, ep.job_id, ranks, ep.action, ep.incident, phase=ep.sweep_phase
            )
            self._decided(ep.job_id, ranks, ep.action)
            self._spawn(sweep, ep.incident)
        for ep in self.hangs.settle(workers):
            self.watch.closed(ep, now)
            log.info("job %s: hang episode %s is over", ep.job_id, ep.id)
        return opened

    def _forget_ended_jobs(self, gone: list[WorkerState], workers: list[WorkerState]) -> None:
        """Per-job state of jobs whose last session was just forgotten goes too:
        a long-lived sidecar serves many jobs, one after another."""
        left = {w.hello.job_id for w in workers}
        for job_id in {w.hello.job_id for w in gone} - left:
            self.hangs.forget_job(job_id)

    def _watch_own_clock(self, now: float) -> None:
        last, self._last_tick_at = self._last_tick_at, now
        if last is None or now - last <= self.freeze_after_s:
            return
        # Every report we hold predates the gap, and those sent during it are
        # still queued: judging now would blame workers for our own pause.
        self.freezes += 1
        self.registry.hold_until_fresh(now)
        log.warning(
            "sidecar loop was frozen or starved for %.2fs (ticks every %.2fs at most): "
            "no verdict on any worker until it reports again",
            now - last,
            self.freeze_after_s,
        )

    def _kill_late_stalled(self, incident: Incident, states: dict[WorkerKey, WorkerState]) -> None:
        ep = self.hangs.episodes.get(incident.job_id)
        if ep is None or self.policy.dry_run:
            return
        late = late_stalled(ep, incident, self.hangs.episodes.policy)
        ranks = [
            r
            for r in late
            if (w := states.get(WorkerKey(incident.job_id, r))) is not None and not w.killed_by_us
        ]
        if ranks:
            sweep = self.actions.sweep(
                ep.id, ep.job_id, ranks, ep.action, ep.incident, phase="stalled_later"
            )
            self._decided(ep.job_id, ranks, ep.action)
            self._spawn(sweep, ep.incident)

    # -- dispatch ----------------------------------------------------------------

    def _set_verdicts(self, findings: list[Finding]) -> None:
        """Each worker's verdict: its worst finding's, else OK.

        Most workers are and stay OK: only those with a finding now, or with
        one until now (``_flagged``), are visited, not every worker each tick.
        """
        worst: dict[WorkerKey, Finding] = {}
        for f in findings:
            cur = worst.get(f.key)
            if cur is None or f.verdict.severity > cur.verdict.severity:
                worst[f.key] = f
        flagged, registry = self._flagged, self.registry
        if flagged:
            for key in [k for k in flagged if k not in worst]:
                w = flagged.pop(key)
                if registry.get(key) is w:  # not a forgotten or replaced session
                    w.verdict, w.verdict_rule = Verdict.OK, ""
        for key, hit in worst.items():
            state = registry.get(key)
            if state is not None:
                state.verdict, state.verdict_rule = hit.verdict, hit.rule
                flagged[key] = state

    def _dispatch(
        self,
        incident: Incident,
        inspect: list[WorkerState] | None = None,
        episode: Episode | None = None,
    ) -> None:
        if not incident.dry_run:
            self._decided(incident.job_id, incident.targets, incident.action)
        if inspect and self.hangs.stacks is not None:
            self._spawn(self._inspect_then_act(incident, inspect, episode), incident)
        else:
            self._publish(incident)
            self._spawn(self.actions.execute(incident), incident)

    def _decided(self, job_id: str, ranks: list[int], action: str) -> None:
        # A dry run decides nothing: its would-be kill must not become the
        # kubelet's kill through the health service either.
        if self.policy.dry_run or not is_destructive(action):
            return
        for rank in ranks:
            state = self.registry.get(WorkerKey(job_id, rank))
            if state is None:
                continue
            for listener in self.kill_listeners:
                try:
                    listener(state)
                except Exception:
                    log.exception("kill listener %r failed", listener)

    async def _execute_decided(self, incident: Incident) -> None:
        """The hang path's action, once its evidence or patience decided: the health
        service's trainprobe.workers turns NOT_SERVING at this same decision."""
        if not incident.dry_run:
            self._decided(incident.job_id, incident.targets, incident.action)
        await self.actions.execute(incident)

    async def _inspect_then_act(
        self, incident: Incident, inspect: list[WorkerState], episode: Episode | None
    ) -> None:
        # Stacks first: the incident (and its span) says where the culprit is stuck.
        await self.hangs.inspect(incident, inspect, episode)
        self._publish(incident)
        await self.actions.execute(incident)

    def _publish(self, incident: Incident) -> None:
        level = logging.WARNING if incident.verdict != Verdict.DEAD else logging.INFO
        text = (incident.diagnosis or {}).get("text")
        log.log(
            level,
            # The diagnosis on a line of its own (the format's newline: arguments are escaped).
            "incident %s: job %s %s (%s) culprits %s waiting %s, detected %.2fs after onset; "
            "action %s on %s%s" + ("\n  %s" if text else "%s"),
            incident.id,
            incident.job_id,
            incident.verdict.value,
            incident.rule,
            incident.culprits,
            incident.waiting,
            incident.detection_latency_s,
            incident.action,
            incident.targets,
            " (dry run)" if incident.dry_run else "",
            text or "",
        )
        self.incident_log.write(incident.to_record())
        for sink in self.sinks:
            try:
                sink.on_incident(incident)
            except Exception:
                log.exception("incident sink %r failed", sink)

    def publish_external(self, incident: Incident, act: Awaitable[None] | None = None) -> None:
        """Publish an incident found outside the tick (the Ray watcher) like any other,
        and run its action, if any, under the same guard and drain."""
        self._publish(incident)
        if act is not None:
            self._spawn(act, incident)

    def _spawn(self, coro: Awaitable[None], incident: Incident | None) -> None:
        self._tasks.spawn(self._guard(coro, incident))

    async def _guard(self, coro: Awaitable[None], incident: Incident | None) -> None:
        try:
            await coro
        except Exception as err:
            what = incident.id if incident is not None else "?"
            action = incident.action if incident is not None else "?"
            log.exception("action %s for incident %s failed", action, what)
            job = incident.job_id if incident is not None else ""
            self.incident_log.write(action_record(what, job, action, ok=False, error=repr(err)))

    def stall_threshold_s(self, job_id: str) -> float:
        ctx = job_contexts(
            (w for w in self.registry if w.hello.job_id == job_id), self.rules.stall
        ).get(job_id)
        return ctx.threshold.seconds if ctx else 0.0

    async def run(self, interval_s: float, stop: asyncio.Event, settle_s: float = 0.0) -> None:
        """Tick every ``interval_s`` until ``stop`` is set, the first after ``settle_s``."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), settle_s)
        self.freeze_after_s = max(FREEZE_MIN_S, FREEZE_TICKS * interval_s)
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("rule evaluation failed; continuing")
            else:
                self.last_tick_at = self._clock()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def drain(self, timeout_s: float = 15.0) -> None:
        """Wait for running actions (used at shutdown and by tests)."""
        await self._tasks.wait(timeout_s)
