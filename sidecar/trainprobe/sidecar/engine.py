"""The tick: rules over the registry, then incidents, then actions and exports.

Data flows one way: registry -> rules -> findings -> incidents -> policy ->
(incident log, exporters, actions). Actions run as tasks, so a slow kill
never delays the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from trainprobe.sidecar.core.incidents import EpisodeTracker, Incident, group_incidents
from trainprobe.sidecar.core.model import Finding, Verdict, WorkerState
from trainprobe.sidecar.core.policy import ActionPolicy, KillBudget, decide
from trainprobe.sidecar.core.registry import Registry
from trainprobe.sidecar.core.rules import RuleConfig, evaluate, job_contexts
from trainprobe.sidecar.incident_log import IncidentLog

log = logging.getLogger("trainprobe.sidecar")


class IncidentSink(Protocol):
    """Something that hears about incidents and findings (exporters)."""

    def on_incident(self, incident: Incident) -> None: ...


class ActionRunner(Protocol):
    async def execute(self, incident: Incident) -> None: ...


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
    ) -> None:
        self.registry = registry
        self.rules = rules
        self.policy = policy
        self.incident_log = incident_log
        self.actions = actions
        self.sinks: list[IncidentSink] = []
        self.episodes = EpisodeTracker()
        self.budget = KillBudget(policy.max_kills_per_hour)
        self._clock = clock
        self._wall = wall_clock
        self._tasks: set[asyncio.Task[None]] = set()
        self.ticks = 0

    def tick(self) -> list[Incident]:
        """One evaluation pass; returns the incidents it opened."""
        now = self._clock()
        self.ticks += 1
        self.registry.forget_stale(now)
        workers = list(self.registry)
        findings = evaluate(workers, self.rules, now)
        self._set_verdicts(workers, findings)
        fresh = self.episodes.new_findings(findings)
        if not fresh:
            return []
        states = {w.key: w for w in workers}
        incidents = group_incidents(fresh, states, now, self._wall())
        for incident in incidents:
            decide(incident, self.policy, self.budget, now)
            self._dispatch(incident)
        return incidents

    def _set_verdicts(self, workers: list[WorkerState], findings: list[Finding]) -> None:
        worst: dict[object, Finding] = {}
        for f in findings:
            cur = worst.get(f.key)
            if cur is None or f.verdict.severity > cur.verdict.severity:
                worst[f.key] = f
        for w in workers:
            f = worst.get(w.key)
            w.verdict = f.verdict if f else Verdict.OK
            w.verdict_rule = f.rule if f else ""

    def _dispatch(self, incident: Incident) -> None:
        level = logging.WARNING if incident.verdict != Verdict.DEAD else logging.INFO
        log.log(
            level,
            "incident %s: job %s ranks %s %s (%s), detected %.2fs after onset; action %s%s",
            incident.id,
            incident.job_id,
            incident.ranks,
            incident.verdict.value,
            incident.rule,
            incident.detection_latency_s,
            incident.action,
            " (dry run)" if incident.dry_run else "",
        )
        self.incident_log.write(incident.to_record())
        for sink in self.sinks:
            try:
                sink.on_incident(incident)
            except Exception:
                log.exception("incident sink %r failed", sink)
        task = asyncio.ensure_future(self._act(incident))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _act(self, incident: Incident) -> None:
        try:
            await self.actions.execute(incident)
        except Exception as err:
            log.exception("action %s for incident %s failed", incident.action, incident.id)
            self.incident_log.write(
                {
                    "type": "action",
                    "incident_id": incident.id,
                    "action": incident.action,
                    "ok": False,
                    "error": repr(err),
                }
            )

    def stall_threshold_s(self, job_id: str) -> float:
        ctx = job_contexts(
            (w for w in self.registry if w.hello.job_id == job_id), self.rules.stall
        ).get(job_id)
        return ctx.threshold.seconds if ctx else 0.0

    async def run(self, interval_s: float, stop: asyncio.Event) -> None:
        """Tick every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("rule evaluation failed; continuing")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def drain(self, timeout_s: float = 15.0) -> None:
        """Wait for running actions (used at shutdown and by tests)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
