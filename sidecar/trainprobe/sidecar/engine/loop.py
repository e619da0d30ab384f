"""The tick: evaluate the rules, step the hang machine, apply its effects.

Data flows one way: registry -> rules -> findings -> the hang machine
(:func:`~trainprobe.sidecar.core.hang.machine.step`: incidents, episodes, decisions)
-> effects, which one runner (:class:`~trainprobe.sidecar.engine.runner.EffectRunner`)
applies: the incident log, exporters, actions, and the registry's named
writers. Actions and evidence rounds run as tasks, so a slow kill never
delays the next tick; what a round finds is fed back to the machine at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from trainprobe.sidecar.core.hang.effects import Effect, Evidence, Opened
from trainprobe.sidecar.core.hang.episodes import CulpritPolicy, Episode
from trainprobe.sidecar.core.hang.machine import step
from trainprobe.sidecar.core.hang.patience import PatienceBook
from trainprobe.sidecar.core.hang.state import (
    HangConfig,
    HangState,
    RoundPlan,
    diagnose,
    local_summaries,
    note,
    plan_round,
)
from trainprobe.sidecar.core.hang.stopped import StoppedWatch
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.incident.policy import ActionPolicy
from trainprobe.sidecar.core.job.view import EpisodeNote, JobView
from trainprobe.sidecar.core.judge.culprit import Diagnosis, RankSummary
from trainprobe.sidecar.core.judge.rules import RuleConfig, job_contexts
from trainprobe.sidecar.core.session.model import Finding, WorkerState
from trainprobe.sidecar.core.session.pace import Pace
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.engine.paced import PacedJudge
from trainprobe.sidecar.engine.ports import (
    ActionRunner,
    GathererFactory,
    IncidentLogPort,
    IncidentSink,
    StackSource,
    StateReader,
    evidence_gatherers,
    proc_states,
)
from trainprobe.sidecar.engine.runner import EffectRunner
from trainprobe.sidecar.tasks import TaskSet

__all__ = ["ActionRunner", "Engine", "IncidentSink"]

log = logging.getLogger("trainprobe.sidecar")

#: A gap between ticks of more than this many intervals (and FREEZE_MIN_S) is
#: a freeze of our own loop. Not lower: a loop that is merely slow, tick after
#: tick, would be gated forever and judge nobody; shorter lags are covered by
#: judging ages as of each report's send (rules.py).
FREEZE_TICKS = 10
FREEZE_MIN_S = 1.0


class Engine:
    """Evaluates the rules every tick and applies what the hang machine decides."""

    def __init__(
        self,
        registry: Registry,
        rules: RuleConfig,
        policy: ActionPolicy,
        incident_log: IncidentLogPort,
        actions: ActionRunner,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        culprits: CulpritPolicy | None = None,
        stacks: StackSource | None = None,
        job_view: JobView | None = None,
        sidecar_id: str = "",
        patience: PatienceBook | None = None,
        gatherers: GathererFactory | None = None,
        read_states: StateReader = proc_states,
    ) -> None:
        self.registry = registry
        self.rules = rules
        self.policy = policy
        self.incident_log = incident_log
        config = HangConfig(
            rules, policy, culprits or CulpritPolicy(), sidecar_id, reads_stacks=stacks is not None
        )
        #: The hang machine's state: episodes, kill budget, patience, verdicts flagged.
        self.state = HangState.new(config, patience, job_view)
        self.budget = self.state.budget
        self.runner = EffectRunner(
            registry,
            incident_log,
            actions,
            gatherers or evidence_gatherers(stacks, clock),
            stacks,
            clock,
            config.round_s,
        )
        self.runner.feed = self._feed
        self.runner.plan = self._plan
        self.sinks = self.runner.sinks
        #: Told of every session this sidecar decides to kill or restart, at the
        #: moment of the decision (before stacks are read and the kill starts):
        #: the health service's ``trainprobe.workers`` answer.
        self.kill_listeners = self.runner.kill_listeners
        self._clock = clock
        self._wall = wall_clock
        self.ticks = 0
        #: When the last tick completed (clock time; None before the first):
        #: the health service's proof that the rules run.
        self.last_tick_at: float | None = None
        #: A tick gap beyond this means our loop was frozen or starved (SIGSTOP,
        #: a CPU hog, a stalled VM); run() derives it from the tick interval.
        self.freeze_after_s = FREEZE_MIN_S
        self.freezes = 0
        self._last_tick_at: float | None = None
        #: The sidecar's own lateness (core/session/pace.py): the servicer notes each
        #: report's ingest lag into it, the loop each tick's lag.
        self.pace = Pace()
        #: The tick interval once run() ticks (tick lag means nothing before).
        self.interval_s: float | None = None
        self._paced = PacedJudge(rules, self.pace)
        #: Silent local ranks read from /proc before any rule's clock runs out.
        self.stopped = StoppedWatch()
        self._read_states = read_states
        self._reads = TaskSet()

    def tick(self) -> list[Incident]:
        """One evaluation pass; returns the incidents it opened."""
        now = self._clock()
        self.ticks += 1
        self._watch_own_clock(now)
        gone = self.registry.forget_stale(now)
        self.registry.arrivals.sweep(now)
        workers = self.registry.workers()
        if gone:
            self.state.forget_jobs(gone, workers)
        findings = self._judge(workers, now)
        findings += self._stopped(workers, now)
        _, effects = step(self.state, workers, findings, (), now, self._wall())
        self.runner.apply(effects)
        return [e.incident for e in effects if isinstance(e, Opened)]

    def _feed(self, evidence: Evidence) -> list[Effect]:
        """What an evidence round or a stack read found, stepped between ticks."""
        workers = self.registry.workers()
        _, effects = step(self.state, workers, None, (evidence,), self._clock(), self._wall())
        return effects

    def _plan(self, episode: Episode, round_no: int) -> RoundPlan | None:
        return plan_round(self.state, episode, self.registry.workers(), round_no)

    def _judge(self, workers: list[WorkerState], now: float) -> list[Finding]:
        return self._paced.judge(workers, now, self.state.flagged)

    def _stopped(self, workers: list[WorkerState], now: float) -> list[Finding]:
        """Ranks the kernel holds stopped (core/hang/stopped.py), and the reads that
        confirm them: one batch at a time, off the loop (a tick outside a
        running loop reads nothing)."""
        view, limit_s = self.state.job_view, self.rules.heartbeat_timeout_s
        try:
            asyncio.get_running_loop()
            ask = not len(self._reads)
        except RuntimeError:
            ask = False
        due, found = self.stopped.check(
            workers,
            now,
            self.pace.allowance(now),
            (lambda job: None if view.awaiting(job) else view.remote(job, now, limit_s))
            if view is not None
            else lambda _: (),
            ask,
        )
        if due:
            self._reads.spawn(self._read_stopped(due, now))
        return found

    async def _read_stopped(self, due: list[WorkerState], asked_at: float) -> None:
        try:
            letters = await self._read_states(due)
        except Exception:
            log.exception("reading silent workers' /proc state failed")
            letters = ["?"] * len(due)
        for w, letter in zip(due, letters, strict=True):
            self.stopped.seen(w, letter, asked_at)

    def _watch_own_clock(self, now: float) -> None:
        last, self._last_tick_at = self._last_tick_at, now
        if last is not None and self.interval_s is not None:
            self.pace.note_tick(now, now - last, self.interval_s)
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

    # -- what others ask of the hang machine -----------------------------------------

    @property
    def job_view(self) -> JobView | None:
        """Other sidecars' ranks of the same jobs (the Ray job sync fills it)."""
        return self.state.job_view

    @property
    def sidecar_id(self) -> str:
        return self.state.config.sidecar_id

    def episode(self, job_id: str) -> Episode | None:
        """The job's open hang episode, if any."""
        return self.state.episodes.get(job_id)

    def diagnose(self, job_id: str) -> tuple[Diagnosis, Episode | None]:
        """The current analysis of a job (LookupError if none of it reported here)."""
        return diagnose(self.state, self.registry.workers(), job_id, self._clock())

    def local_summaries(self, job_id: str, now: float) -> list[RankSummary]:
        """The ranks of ``job_id`` that report to this sidecar (what it shares)."""
        return local_summaries(self.state, self.registry, job_id, now)

    def note(self, job_id: str) -> EpisodeNote | None:
        """What this sidecar tells the job's coordinator about the job's episode."""
        return note(self.state, job_id)

    def closed_note(self, job_id: str) -> EpisodeNote | None:
        """The note of the job's last episode decided here that closed since the
        last call (taken: a JobSync tells it once)."""
        return self.state.closed.pop(job_id, None)

    def publish_external(self, incident: Incident, act: Awaitable[None] | None = None) -> None:
        """Publish an incident found outside the tick (the Ray watcher) like any other,
        and run its action, if any, under the same guard and drain."""
        self.runner.publish(incident)
        if act is not None:
            self.runner.spawn(act, incident)

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
        self.interval_s = interval_s
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
        await self.runner.drain(timeout_s)
