"""Carrying out an incident's action: observe, dump, kill or restart.

Every outcome is appended to the incident log as an ``action`` record that
names its incident. Killing goes through a :class:`Killer`: signals for
processes this sidecar can see, an Abort command over the worker's own stream
otherwise; the Ray integration plugs in its own killer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.commander import Commander
from trainprobe.sidecar.core.incidents import Incident
from trainprobe.sidecar.core.model import ReportData, WorkerKey, WorkerState
from trainprobe.sidecar.core.recovery import RecoveryWatch
from trainprobe.sidecar.core.registry import Registry
from trainprobe.sidecar.incident_log import IncidentLog
from trainprobe.sidecar.procs import KillOutcome, terminate

log = logging.getLogger("trainprobe.sidecar")

#: How long a worker has to answer a stack-dump request.
DUMP_TIMEOUT_S = 2.0
#: Hears each action record after it is logged (exporters: action spans, counts).
ActionListener = Callable[[Incident, dict[str, object]], None]


class Killer(Protocol):
    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        """Make the worker's process go away; describe what was done.

        The record has at least ``pid``, ``method``, ``exited`` and ``error``.
        A killer may also have ``start()`` and ``close()``; the sidecar calls
        them when it starts and stops.
        """
        ...


#: Builds a killer once the sidecar's command channel exists.
KillerFactory = Callable[[Commander], Killer]


class SignalKiller:
    """Signals local pids; has a relaying node signal relayed ones; asks other
    remote workers to abort over their stream."""

    def __init__(self, commander: Commander) -> None:
        self.commander = commander

    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        if state.relay is not None:
            # A relayed worker: the node that relays it signals the pid and says how it went.
            record: dict[str, object] = await state.relay.kill(state.hello.pid, grace_s)
            if record["signals"] or record["exited"]:
                return record
            # Nothing signalled (another host's process; the node gone): ask the
            # worker itself over its relayed stream, as for any remote worker.
            aborted = await self._abort(state, grace_s)
            aborted["relay_error"] = record["error"]
            return aborted
        if state.local:
            outcome = await terminate(state.hello.pid, grace_s, state.proc_start_ticks)
            return outcome.to_record()
        return await self._abort(state, grace_s)

    async def _abort(self, state: WorkerState, grace_s: float) -> dict[str, object]:
        result = await self.commander.request(
            state.key,
            DUMP_TIMEOUT_S,
            abort=probe_pb2.Abort(reason="trainprobe kill", grace_s=grace_s),
        )
        out = KillOutcome(pid=state.hello.pid, method="abort-command", exited=False)
        out.error = "" if result is not None and result.ok else "worker did not acknowledge abort"
        return out.to_record()


def default_killer(ray_address: str | None, ray_timeout_s: float, commander: Commander) -> Killer:
    """Signals, or Ray first when ``ray_address`` is set (Ray is imported lazily)."""
    if not ray_address:
        return SignalKiller(commander)
    from trainprobe.sidecar.ray.killer import RayKiller
    from trainprobe.sidecar.ray.link import RayLink

    link = RayLink(ray_address, timeout_s=ray_timeout_s)
    return RayKiller(link, SignalKiller(commander), timeout_s=ray_timeout_s)


class RecoveryLog:
    """Report listener: logs a ``recovery`` record when a killed rank's replacement
    completes its first step (see :class:`~trainprobe.sidecar.core.recovery.RecoveryWatch`)."""

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

    def _record(self, incident: Incident, **fields: object) -> None:
        record: dict[str, object] = {
            "type": "action",
            "incident_id": incident.id,
            "job_id": incident.job_id,
            "action": incident.action,
            **fields,
        }
        self.incident_log.write(record)
        for listener in self.listeners:
            try:
                listener(incident, record)
            except Exception:
                log.exception("action listener %r failed", listener)

    async def execute(self, incident: Incident) -> None:
        action = incident.action
        if action == "observe":
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
        if action == "dump":
            await self.dump(incident, targets)
        elif action in ("kill", "restart"):
            await self.kill(incident, targets, restart=action == "restart")

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
        records, ok = await self._kill_all(incident.id, targets, restart)
        log.warning(
            "incident %s: %s ranks %s -> %s",
            incident.id,
            incident.action,
            incident.targets,
            "done" if ok else records,
        )
        self._record(incident, ok=ok, outcomes=records)

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
        over) or ``stalled_later`` (a rank that joined an inconclusive stall).
        ``incident`` is the one that opened the episode here, if any: listeners
        (exporters) then hear of the sweep as one of its actions.
        """
        targets = [
            s for s in (self.registry.get(WorkerKey(job_id, r)) for r in ranks) if s is not None
        ]
        records, ok = await self._kill_all(episode_id, targets, restart=action == "restart")
        log.warning(
            "hang episode %s: swept ranks %s of job %s -> %s",
            episode_id,
            ranks,
            job_id,
            "done" if ok else records,
        )
        fields = {"action": action, "phase": phase, "ok": ok, "outcomes": records}
        if incident is not None:
            self._record(incident, **fields)
        else:  # a followed episode with nothing of ours in its incident
            self.incident_log.write(
                {"type": "action", "incident_id": episode_id, "job_id": job_id, **fields}
            )

    async def _kill_all(
        self, incident_id: str, targets: list[WorkerState], restart: bool
    ) -> tuple[dict[str, object], bool]:
        for t in targets:
            t.killed_by_us = True  # its exit is expected: no DEAD incident for it
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
            if self.recovery is not None and isinstance(o, dict) and o.get("exited"):
                method = str(o.get("method", ""))
                self.recovery.expect(incident_id, t.key, t.hello.pid, killed_at, method)
        ok = all(isinstance(o, dict) and o.get("exited") and not o.get("error") for o in outcomes)
        return records, ok
