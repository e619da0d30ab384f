"""The one place that carries out the hang machine's effects.

:func:`~trainprobe.sidecar.core.hang.machine.step` decides; :class:`EffectRunner`
applies what it returns, in order, through the protocols of :mod:`.ports`:
verdicts, kill marks and resumes go to the registry's named writers, records
and published incidents to the incident log and the sinks, kill decisions to
the listeners (the health service), actions and sweeps to the action runner.
The slow effects run as tasks, so a slow kill never delays the next tick:
a :class:`Watch` samples its episode round after round, an :class:`Inspect`
reads stacks, and what they find is fed back to the machine (``feed``), whose
answer is applied inside the same task (its action awaited there).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from trainprobe.sidecar.core.hang.effects import (
    Effect,
    Evidence,
    EvidenceRound,
    ExecuteAction,
    Inspect,
    KillDecided,
    Log,
    MarkKill,
    Opened,
    Publish,
    Record,
    ResumeJob,
    SetVerdict,
    StacksRead,
    Sweep,
    Watch,
)
from trainprobe.sidecar.core.hang.episodes import Episode
from trainprobe.sidecar.core.hang.state import ROUND_S, RoundPlan
from trainprobe.sidecar.core.incident.actions import action_record
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.session.model import Verdict, WorkerKey, WorkerState
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.engine.ports import (
    ActionRunner,
    GathererFactory,
    IncidentLogPort,
    IncidentSink,
    StackSource,
)
from trainprobe.sidecar.tasks import TaskSet

__all__ = ["EffectRunner"]

log = logging.getLogger("trainprobe.sidecar")

_SLOW = (ExecuteAction, Sweep, Inspect, Watch)


class EffectRunner:
    """Applies effects; the engine sets ``feed`` and ``plan`` (the machine's side)."""

    def __init__(
        self,
        registry: Registry,
        incident_log: IncidentLogPort,
        actions: ActionRunner,
        gatherers: GathererFactory,
        stacks: StackSource | None = None,
        clock: Callable[[], float] = time.monotonic,
        round_s: float = ROUND_S,
    ) -> None:
        self.registry = registry
        self.incident_log = incident_log
        self.actions = actions
        self.gatherers = gatherers
        self.stacks = stacks
        self.round_s = round_s
        self._clock = clock
        self._tasks = TaskSet()
        self.sinks: list[IncidentSink] = []
        #: Told of every session this sidecar decides to kill or restart, at the
        #: moment of the decision (before stacks are read and the kill starts).
        self.kill_listeners: list[Callable[[WorkerState], None]] = []
        #: The machine's answer to what a slow effect found (set by the engine).
        self.feed: Callable[[Evidence], list[Effect]] = lambda _: []
        #: The plan of an episode's next evidence round, None once it is over.
        self.plan: Callable[[Episode, int], RoundPlan | None] = lambda _ep, _n: None

    # -- applying ----------------------------------------------------------------

    def apply(self, effects: Sequence[Effect]) -> None:
        """Apply a tick's effects: the slow ones become tasks."""
        for e in effects:
            if isinstance(e, _SLOW):
                self._start(e)
            else:
                self._now(e)

    async def _apply_inline(
        self, effects: Sequence[Effect], watching: Episode | None = None
    ) -> Watch | None:
        """Apply a slow effect's follow-up inside its task (its action awaited
        here); return the next round of ``watching``, if the machine asks one."""
        more: Watch | None = None
        for e in effects:
            if isinstance(e, ExecuteAction):
                await self.actions.execute(e.incident)
            elif isinstance(e, Watch) and e.episode is watching:
                more = e
            elif isinstance(e, _SLOW):
                self._start(e)
            else:
                self._now(e)
        return more

    def _start(self, e: ExecuteAction | Sweep | Inspect | Watch) -> None:
        if isinstance(e, ExecuteAction):
            self.spawn(self.actions.execute(e.incident), e.incident)
        elif isinstance(e, Sweep):
            sweep = self.actions.sweep(
                e.episode_id, e.job_id, list(e.ranks), e.action, e.incident, phase=e.phase
            )
            self.spawn(sweep, e.incident)
        elif isinstance(e, Inspect):
            self.spawn(self._inspect(e), e.incident)
        else:
            self.spawn(self._watch(e), e.incident)

    def _now(self, e: Effect) -> None:
        registry = self.registry
        if isinstance(e, SetVerdict):
            registry.set_verdict(e.key, e.verdict, e.rule)
        elif isinstance(e, Record):
            self.incident_log.write(e.record.to_record())
        elif isinstance(e, Publish):
            self.publish(e.incident)
        elif isinstance(e, Log):
            log.log(e.level, e.message, *e.args)
        elif isinstance(e, KillDecided):
            self._decided(e.job_id, e.ranks)
        elif isinstance(e, MarkKill):
            registry.mark_decided(WorkerKey(e.job_id, e.rank), e.rule, e.incident_id, e.evicted)
        elif isinstance(e, ResumeJob):
            registry.resume_job(e.job_id, e.at)
        else:
            assert isinstance(e, Opened), e  # what Engine.tick returns: nothing to apply

    def _decided(self, job_id: str, ranks: Sequence[int]) -> None:
        for rank in ranks:
            state = self.registry.get(WorkerKey(job_id, rank))
            if state is None:
                continue
            for listener in self.kill_listeners:
                try:
                    listener(state)
                except Exception:
                    log.exception("kill listener %r failed", listener)

    def publish(self, incident: Incident) -> None:
        """The incident's log line, its record, and every sink."""
        level = logging.WARNING if incident.verdict != Verdict.DEAD else logging.INFO
        text = (incident.diagnosis or {}).get("text")
        waiting = incident.waiting
        log.log(
            level,
            # The diagnosis on a line of its own (the format's newline: arguments are
            # escaped). Lists stay arguments: the formatter cuts a long one.
            "incident %s: job %s %s (%s) culprits %s"
            + (" waiting %s" if waiting else "%s")
            + ", detected %.2fs after onset; action %s on %s%s%s"
            + ("\n  %s" if text else "%s"),
            incident.id,
            incident.job_id,
            incident.verdict.value,
            incident.rule,
            incident.culprits,
            waiting or "",
            incident.detection_latency_s,
            incident.action,
            incident.targets,
            incident.action_when(),
            " (dry run)" if incident.dry_run else "",
            text or "",
        )
        self.incident_log.write(incident.to_record())
        for sink in self.sinks:
            try:
                sink.on_incident(incident)
            except Exception:
                log.exception("incident sink %r failed", sink)

    # -- the slow effects ----------------------------------------------------------

    async def _watch(self, w: Watch) -> None:
        """Sample an episode round after round until the machine stops asking. A
        failed round is logged and the next one runs: a watch that died would
        leave a real hang unkilled."""
        gatherer = self.gatherers(w.signals)
        ep, incident = w.episode, w.incident
        round_no, delay_s = w.round, w.delay_s
        while True:
            if delay_s:
                await asyncio.sleep(delay_s)
            plan = self.plan(ep, round_no)
            if plan is None:
                return
            try:
                evidence, kernel = await asyncio.gather(
                    gatherer.round(
                        plan.states, plan.with_stacks, plan.stack_ranks, plan.flight_recorder
                    ),
                    gatherer.kernel_states(plan.others),
                )
                found = EvidenceRound(
                    ep,
                    incident,
                    round_no,
                    plan.states,
                    evidence,
                    dict(gatherer.records),
                    gatherer.stacks_s,
                    kernel,
                )
                more = await self._apply_inline(self.feed(found), ep)
                if more is None:
                    return
                round_no, delay_s = more.round, more.delay_s
            except Exception:
                log.exception(
                    "incident %s: evidence round failed; next round in %gs",
                    incident.id,
                    self.round_s,
                )
                round_no, delay_s = round_no + 1, self.round_s

    async def _inspect(self, e: Inspect) -> None:
        """Read the stacks of the sessions an Inspect names, then act on them."""
        assert self.stacks is not None  # the machine asks only where stacks are read
        t0 = self._clock()
        records = await asyncio.gather(
            *(self.stacks.collect(w, e.signals) for w in e.workers), return_exceptions=True
        )
        seconds = round(self._clock() - t0, 3)
        read: list[tuple[int, dict[str, object]]] = []
        for w, rec in zip(e.workers, records, strict=True):
            if isinstance(rec, BaseException):
                rec = {"method": "", "error": repr(rec)}
            read.append((w.hello.rank, rec))
        await self._apply_inline(self.feed(StacksRead(e.incident, e.episode, tuple(read), seconds)))

    # -- tasks ---------------------------------------------------------------------

    def spawn(self, coro: Awaitable[None], incident: Incident | None) -> None:
        """Run ``coro`` as a task; a failure is logged and recorded as its action's."""
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

    async def drain(self, timeout_s: float = 15.0) -> None:
        """Wait for the tasks running now (used at shutdown and by tests)."""
        await self._tasks.wait(timeout_s)
