"""Carrying out an incident's action: observe, dump, kill or restart.

Every outcome is appended to the incident log as an ``action`` record that
names its incident (:func:`~trainprobe.sidecar.core.incident.actions.action_record`).
Killing goes through a :class:`~trainprobe.sidecar.act.killers.Killer`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.act.killers import DUMP_TIMEOUT_S, Killer
from trainprobe.sidecar.act.stacks import proc_uid, remove_stack_file
from trainprobe.sidecar.core.incident.actions import (
    Action,
    action_record,
    eviction_line,
    is_destructive,
)
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.incident.recovery import RecoveryWatch
from trainprobe.sidecar.core.session.model import ReportData, WorkerKey, WorkerState
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.core.text import printable
from trainprobe.sidecar.transport.commander import Commander

log = logging.getLogger("trainprobe.sidecar")

#: How long a kill waits for the job's other ranks to take note of it.
NOTICE_TIMEOUT_S = 0.25

#: Hears each action record after it is logged (exporters: action spans, counts).
ActionListener = Callable[[Incident, dict[str, object]], None]


class RecoveryLog:
    """Report listener: logs a ``recovery`` record when a killed rank's replacement
    completes its first step (see
    :class:`~trainprobe.sidecar.core.incident.recovery.RecoveryWatch`)."""

    def __init__(
        self, watch: RecoveryWatch, incident_log: IncidentLog, clock: Callable[[], float]
    ) -> None:
        self.watch = watch
        self.incident_log = incident_log
        self._clock = clock

    def __call__(self, state: WorkerState, report: ReportData) -> None:
        if not self.watch:  # no kill awaits its replacement: the usual case, every report
            return
        record = self.watch.on_report(state, report, self._clock())
        if record is None:
            return
        log.warning(
            "incident %s: rank %s of job %s is back (pid %s) at step %s, %ss after the kill",
            record["incident_id"],
            record["rank"],
            record["job_id"],
            record["new_pid"],
            record["first_step"],
            record["resumed_after_s"],
        )
        self.incident_log.write(record)


class Actions:
    """Runs the action an incident was given."""

    def __init__(
        self,
        registry: Registry,
        commander: Commander,
        incident_log: IncidentLog,
        killer: Killer,
        kill_grace_s: float = 5.0,
        recovery: RecoveryWatch | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.commander = commander
        self.incident_log = incident_log
        self.killer = killer
        self.kill_grace_s = kill_grace_s
        #: Told about every killed rank, to report when a replacement resumes.
        self.recovery = recovery
        self._clock = clock
        self.listeners: list[ActionListener] = []

    def _targets(self, incident: Incident) -> list[WorkerState]:
        states = []
        for rank in incident.targets:
            state = self.registry.get(WorkerKey(incident.job_id, rank))
            if state is not None:
                states.append(state)
        return states

    def _record(self, incident: Incident, action: str | None = None, **fields: object) -> None:
        """Log an action record of ``incident`` (its own action unless ``action`` says)."""
        record = action_record(incident.id, incident.job_id, action or incident.action, **fields)
        self.incident_log.write(record)
        for listener in self.listeners:
            try:
                listener(incident, record)
            except Exception:
                log.exception("action listener %r failed", listener)

    async def execute(self, incident: Incident) -> None:
        action = incident.action
        if action == Action.OBSERVE:
            return
        targets = self._targets(incident)
        if incident.dry_run:
            log.warning(
                "dry run: would %s ranks %s (pids %s) of job %s",
                action,
                [t.hello.rank for t in targets],
                [t.hello.pid for t in targets],
                incident.job_id,
            )
            self._record(incident, dry_run=True, ok=True, ranks=[t.hello.rank for t in targets])
            return
        if action == Action.DUMP:
            await self.dump(incident, targets)
        elif action == Action.EVICT:
            await self.evict(incident, targets)
        elif is_destructive(action):
            await self.kill(incident, targets, restart=action == Action.RESTART)

    async def dump(self, incident: Incident, targets: list[WorkerState]) -> dict[int, str]:
        results = await asyncio.gather(
            *(
                self.commander.request(t.key, DUMP_TIMEOUT_S, dump_stacks=probe_pb2.DumpStacks())
                for t in targets
            )
        )
        stacks = {
            t.hello.rank: (r.python_stacks if r is not None and r.ok else "")
            for t, r in zip(targets, results, strict=False)
        }
        self._record(
            incident,
            ok=all(stacks.values()),
            stacks={str(k): v for k, v in stacks.items()},
            unanswered=[k for k, v in stacks.items() if not v],
        )
        return stacks

    async def kill(self, incident: Incident, targets: list[WorkerState], restart: bool) -> None:
        await self._notify_peers(incident, targets)
        records, ok = await self._kill_all(incident.id, targets, restart)
        log.warning(
            "incident %s: %s ranks %s -> %s",
            incident.id,
            incident.action,
            incident.targets,
            "done" if ok else records,
        )
        self._record(incident, ok=ok, outcomes=records)

    async def evict(self, incident: Incident, targets: list[WorkerState]) -> None:
        """End a replicated job's culprit replica group; the other replicas go on.

        The survivors are told first, over each one's command stream: a hook
        that watches a torchft Manager reports the error to it, so the step
        the evicted replica was part of is discarded (``should_commit()`` is
        False) and the next quorum forms without it. Then the group's
        processes are ended through the same killer as a kill (verified pids
        only; a gone process is simply recorded as exited). Nothing else of
        the job is touched: no sweep follows.
        """
        ev = (incident.diagnosis or {}).get("eviction")
        ev = ev if isinstance(ev, dict) else {}
        replicas = [str(r) for r in ev.get("replicas") or ()]
        left = int(ev.get("replicas_left") or 0)
        line = eviction_line(replicas, left)
        await self._notify_peers(incident, targets, ",".join(replicas), left)
        records, ok = await self._kill_all(incident.id, targets, restart=False)
        log.warning(
            "incident %s: %s (ranks %s) -> %s",
            incident.id,
            line,
            incident.targets,
            "done" if ok else records,
        )
        self._record(
            incident,
            ok=ok,
            outcomes=records,
            evicted_replicas=replicas,
            replicas_left=left,
            summary=line,
        )

    async def _notify_peers(
        self,
        incident: Incident,
        targets: list[WorkerState],
        evicted_replica: str = "",
        replicas_left: int = 0,
    ) -> None:
        """Tell the job's other connected ranks whom we kill and why, before we do.

        Their next collective fails because the peer is gone; with the notice
        their error names the kill and the incident. Acknowledged within
        NOTICE_TIMEOUT_S (a healthy reporter thread answers in milliseconds),
        so the notice is there before the error; the kill waits no longer.
        """
        killed = {t.key for t in targets}
        peers = [
            w
            for w in self.registry.jobs().get(incident.job_id, [])
            if w.key not in killed and w.connected and self.commander.connected(w.key)
        ]
        if not peers or not targets:
            return
        text = str((incident.diagnosis or {}).get("text") or "")
        # The diagnosis quotes clients' own words (a culprit's host, its stack),
        # and the hooks log the notice to their training's terminal: escaped here.
        notice = probe_pb2.Notice(
            incident_id=incident.id,
            job_id=incident.job_id,
            killed_ranks=sorted(t.hello.rank for t in targets),
            verdict=incident.verdict.value,
            rule=incident.rule,
            reason=printable(text.splitlines()[0])[:300] if text else "",
            evicted_replica=printable(evicted_replica),
            replicas_left=replicas_left,
        )
        await asyncio.gather(
            *(self.commander.request(w.key, NOTICE_TIMEOUT_S, notice=notice) for w in peers)
        )

    async def sweep(
        self,
        episode_id: str,
        job_id: str,
        ranks: list[int],
        action: str,
        incident: Incident | None = None,
        phase: str = "job_kill_grace",
    ) -> None:
        """Kill ranks of a hung job's episode after its first action.

        ``phase`` says why: ``job_kill_grace`` (what is left once the grace is
        over), ``peers_of_gone`` (the culprit is already over: its peers can never
        finish their collective) or ``stalled_later`` (a rank that joined an
        inconclusive stall).
        ``incident`` is the one that opened the episode here, if any: listeners
        (exporters) then hear of the sweep as one of its actions.
        """
        targets = [
            s for s in (self.registry.get(WorkerKey(job_id, r)) for r in ranks) if s is not None
        ]
        records, ok = await self._kill_all(episode_id, targets, restart=action == Action.RESTART)
        log.warning(
            "hang episode %s: swept ranks %s of job %s -> %s",
            episode_id,
            ranks,
            job_id,
            "done" if ok else records,
        )
        fields = {"phase": phase, "ok": ok, "outcomes": records}
        if incident is not None:
            self._record(incident, action, **fields)
        else:  # a followed episode with nothing of ours in its incident
            self.incident_log.write(action_record(episode_id, job_id, action, **fields))

    async def _kill_all(
        self, incident_id: str, targets: list[WorkerState], restart: bool
    ) -> tuple[dict[str, object], bool]:
        for t in targets:
            self.registry.mark_killed(t)  # its exit is expected: no DEAD incident for it
        # Read before the kill: once the process is gone /proc cannot say whose it was.
        uids = {
            t.key: proc_uid(t.hello.pid) if t.local and t.hello.stack_file else None
            for t in targets
        }
        outcomes = await asyncio.gather(
            *(self.killer.kill(t, self.kill_grace_s, restart) for t in targets),
            return_exceptions=True,
        )
        records: dict[str, object] = {}
        killed_at = self._clock()
        for t, o in zip(targets, outcomes, strict=False):
            records[str(t.hello.rank)] = (
                {"pid": t.hello.pid, "error": repr(o)} if isinstance(o, BaseException) else o
            )
            if isinstance(o, dict) and o.get("exited") and uids[t.key] is not None:
                remove_stack_file(t.hello.stack_file, t.hello.pid, uids[t.key])
            if self.recovery is not None and isinstance(o, dict) and o.get("exited"):
                method = str(o.get("method", ""))
                self.recovery.expect(incident_id, t.key, t.hello.pid, killed_at, method)
        ok = all(isinstance(o, dict) and o.get("exited") and not o.get("error") for o in outcomes)
        return records, ok
