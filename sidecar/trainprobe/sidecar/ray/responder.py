"""The Ray watcher's findings, answered like every other incident.

Each finding becomes an :class:`~trainprobe.sidecar.core.incident.incidents.Incident`
(:func:`~trainprobe.sidecar.core.ray.incident.ray_incident`), is published
through the engine (incident log, spans, metrics: the same path and format as
a stall), and, with ``on_ray_finding`` kill or restart, its actors are ended
(:mod:`~trainprobe.sidecar.ray.ending`) on a thread, under the engine's task
guard and kill budget. Also what ``trainprobe status`` and ``diagnose --ray``
read.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Callable
from typing import Any

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.act.actions import ActionListener
from trainprobe.sidecar.core.incident.actions import Action, action_record
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.ray.incident import decide_ray, ray_incident
from trainprobe.sidecar.core.ray.snapshot import RayFinding
from trainprobe.sidecar.core.ray.wait import edge_record, render_dot, render_text

__all__ = ["RayFindingResponder"]

#: Findings kept for ``trainprobe status`` (the incident log keeps them all).
KEPT = 100
#: At most this many errors of the last snapshot go into a status reply.
STATUS_ERRORS = 10


class RayFindingResponder:
    """Turns findings into incidents and actions; answers status and ``diagnose --ray``."""

    def __init__(
        self,
        engine: Any,
        settings: Any,
        listeners: list[ActionListener],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.listeners = listeners
        self.clock = clock
        #: The RayWatcher, once it runs.
        self.watcher: Any = None
        self.recent: collections.deque[tuple[RayFinding, Incident]] = collections.deque(maxlen=KEPT)

    async def run(self, link: Any, stop: asyncio.Event) -> None:
        """Start the watcher once ``link`` (the killer's line to Ray) has joined Ray,
        then judge every ``ray_watch_interval_s`` until ``stop``."""
        from trainprobe.sidecar.ray.watcher import RayWatcher

        while not link.ready:
            await asyncio.sleep(0.5)
            if stop.is_set():
                return
        self.watcher = RayWatcher(pending_limit_s=self.settings.placement_pending_limit_s)
        await self.watcher.run(stop, self.on_finding, self.settings.ray_watch_interval_s)

    def on_finding(self, finding: RayFinding) -> Incident:
        """Called on the loop for each finding; returns its incident."""
        now = self.clock()
        incident = ray_incident(finding, now, time.time())
        s = self.settings
        targets = decide_ray(
            incident, finding, s.on_ray_finding, s.dry_run, self.engine.budget, now
        )
        self.recent.append((finding, incident))
        act = self._act(incident, targets) if targets else None
        self.engine.publish_external(incident, act)
        return incident

    async def _act(self, incident: Incident, actor_ids: list[str]) -> None:
        if incident.dry_run:
            self._record(incident, ok=True, dry_run=True, actor_ids=actor_ids)
            return
        from trainprobe.sidecar.ray.ending import end_actors

        outcomes = await asyncio.to_thread(
            end_actors,
            actor_ids,
            incident.action == Action.KILL,
            getattr(self.watcher, "address", None),
            int(self.settings.ray_timeout_s),
        )
        self._record(
            incident,
            ok=all(bool(o.get("ok")) for o in outcomes.values()),
            actor_ids=actor_ids,
            outcomes=outcomes,
        )

    def _record(self, incident: Incident, **fields: object) -> None:
        record = action_record(incident.id, incident.job_id, incident.action, **fields)
        self.engine.incident_log.write(record)
        for listener in self.listeners:
            listener(incident, record)

    # -- what the CLI reads -----------------------------------------------------------

    def status(self) -> probe_pb2.RayWatchStatus:
        w = self.watcher
        last = w.last if w is not None else None
        return probe_pb2.RayWatchStatus(
            snapshots=w.snapshots if w is not None else 0,
            last_snapshot_age_s=(time.time() - last.taken_at) if last is not None else -1.0,
            truncated=list(last.truncated) if last is not None else [],
            errors=[e[:300] for e in last.errors[:STATUS_ERRORS]] if last is not None else [],
            cpu_s=w.cpu_s if w is not None else 0.0,
            findings=[
                probe_pb2.RayFindingStatus(
                    rule=f.rule,
                    key=f.key,
                    job_id=f.job_id,
                    text=f.text,
                    at=f.at,
                    incident_id=inc.id,
                    action=str(inc.action),
                )
                for f, inc in self.recent
            ],
        )

    def diagnose(self, dot: bool) -> probe_pb2.DiagnoseReply:
        """The wait graph of the last snapshot (LookupError before the first one)."""
        graph = self.watcher.graph if self.watcher is not None else None
        if graph is None:
            raise LookupError("the Ray watcher has taken no snapshot yet; try again shortly")
        record = {
            "tasks": len(graph.tasks),
            "edges": [edge_record(graph, e) for e in graph.edges],
        }
        return probe_pb2.DiagnoseReply(
            text=render_dot(graph) if dot else render_text(graph),
            json=json.dumps(record, default=str),
        )
