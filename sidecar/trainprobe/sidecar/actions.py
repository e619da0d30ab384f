"""Carrying out an incident's action: observe, dump, kill or restart.

Every outcome is appended to the incident log as an ``action`` record that
names its incident. Killing goes through a :class:`Killer`: signals for
processes this sidecar can see, an Abort command over the worker's own stream
otherwise; the Ray integration plugs in its own killer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.incidents import Incident
from trainprobe.sidecar.core.model import WorkerKey, WorkerState
from trainprobe.sidecar.core.registry import Registry
from trainprobe.sidecar.incident_log import IncidentLog
from trainprobe.sidecar.procs import KillOutcome, terminate
from trainprobe.sidecar.servicer import Commander

log = logging.getLogger("trainprobe.sidecar")

#: How long a worker has to answer a stack-dump request.
DUMP_TIMEOUT_S = 2.0


class Killer(Protocol):
    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        """Make the worker's process go away; describe what was done."""
        ...


class SignalKiller:
    """Signals local pids; asks remote workers to abort over their stream."""

    def __init__(self, commander: Commander) -> None:
        self.commander = commander

    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        if state.local:
            outcome = await terminate(state.hello.pid, grace_s, state.proc_start_ticks)
            return outcome.to_record()
        result = await self.commander.request(
            state.key,
            DUMP_TIMEOUT_S,
            abort=probe_pb2.Abort(reason="trainprobe kill", grace_s=grace_s),
        )
        out = KillOutcome(pid=state.hello.pid, method="abort-command", exited=False)
        out.error = "" if result is not None and result.ok else "worker did not acknowledge abort"
        return out.to_record()


class Actions:
    """Runs the action an incident was given."""

    def __init__(
        self,
        registry: Registry,
        commander: Commander,
        incident_log: IncidentLog,
        killer: Killer,
        kill_grace_s: float = 5.0,
    ) -> None:
        self.registry = registry
        self.commander = commander
        self.incident_log = incident_log
        self.killer = killer
        self.kill_grace_s = kill_grace_s

    def _targets(self, incident: Incident) -> list[WorkerState]:
        states = []
        for rank in incident.targets:
            state = self.registry.get(WorkerKey(incident.job_id, rank))
            if state is not None:
                states.append(state)
        return states

    def _record(self, incident: Incident, **fields: object) -> None:
        self.incident_log.write(
            {
                "type": "action",
                "incident_id": incident.id,
                "job_id": incident.job_id,
                "action": incident.action,
                **fields,
            }
        )

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
        for t in targets:
            t.killed_by_us = True  # its exit is expected: no DEAD incident for it
        outcomes = await asyncio.gather(
            *(self.killer.kill(t, self.kill_grace_s, restart) for t in targets),
            return_exceptions=True,
        )
        records = {}
        for t, o in zip(targets, outcomes, strict=False):
            records[str(t.hello.rank)] = (
                {"pid": t.hello.pid, "error": repr(o)} if isinstance(o, BaseException) else o
            )
        ok = all(isinstance(o, dict) and o.get("exited") and not o.get("error") for o in outcomes)
        log.warning(
            "incident %s: %s ranks %s -> %s",
            incident.id,
            incident.action,
            incident.targets,
            "done" if ok else records,
        )
        self._record(incident, ok=ok, outcomes=records)
