"""Assembles a sidecar from its settings and serves it on grpc.aio.

The composition root: :class:`Sidecar` builds every part once, wires the
listeners each part needs (telemetry, recovery, the Ray watcher), opens the
servers and stops it all in an order that loses nothing (the engine's last
effects drained before the killer closes, the incident log closed last).
What the settings make of each part is ``assembly.py``; the answers to
Status and Diagnose are ``queries.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from trainprobe.proto import VERSION, probe_pb2
from trainprobe.sidecar import assembly
from trainprobe.sidecar.act.actions import Actions, RecoveryLog
from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.act.killers import Killer, KillerFactory
from trainprobe.sidecar.act.stacks import StackCollector
from trainprobe.sidecar.config.settings import Settings
from trainprobe.sidecar.core.hang.episodes import CulpritPolicy
from trainprobe.sidecar.core.hang.patience import PatienceBook
from trainprobe.sidecar.core.incident.recovery import RecoveryWatch
from trainprobe.sidecar.core.job.view import EpisodeNote, JobView
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.engine.loop import Engine
from trainprobe.sidecar.otel import Telemetry, start_telemetry
from trainprobe.sidecar.otel.metrics.measures import JobSyncLoad
from trainprobe.sidecar.queries import Queries
from trainprobe.sidecar.relay.upstream import RelayUpstream
from trainprobe.sidecar.sync.link import StreamTransport
from trainprobe.sidecar.sync.upstream import JobSyncUpstream
from trainprobe.sidecar.transport.commander import Commander
from trainprobe.sidecar.transport.doom_files import DoomFiles
from trainprobe.sidecar.transport.health import EngineHealth, Health
from trainprobe.sidecar.transport.listen.identity import TicketDesk

# ListenError is re-exported: callers catch it from here.
from trainprobe.sidecar.transport.listen.sockets import (  # noqa: F401
    ListenError,
    open_servers,
    server_tls,
)
from trainprobe.sidecar.transport.servicer import SidecarServicer

log = logging.getLogger("trainprobe.sidecar")
SIDECAR_VERSION = VERSION


class Sidecar:
    """A running sidecar: registry, rules tick, servers. Use within one loop."""

    def __init__(
        self,
        settings: Settings,
        killer: Killer | None = None,
        clock: Callable[[], float] = time.monotonic,
        killer_factory: KillerFactory | None = None,
        sidecar_id: str = "",
    ) -> None:
        self.settings = settings
        self.clock = clock
        # A silent holder loses its rank after a heartbeat (the squatter rule).
        self.registry = Registry(takeover_after_s=settings.heartbeat_timeout_s)
        self.tickets = TicketDesk()
        self.commander = Commander()
        self.incident_log = IncidentLog(
            settings.incident_log_path,
            max_bytes=settings.incident_log_max_bytes,
            rotated_files=settings.incident_log_keep,
        )
        if killer is None:
            killer = (
                killer_factory(self.commander)
                if killer_factory is not None
                else assembly.default_killer(
                    settings.ray_address, settings.ray_timeout_s, self.commander
                )
            )
        self.killer = killer
        self.recovery = RecoveryWatch()
        self.actions = Actions(
            self.registry,
            self.commander,
            self.incident_log,
            killer,
            kill_grace_s=settings.kill_grace_s,
            recovery=self.recovery,
            clock=clock,
        )
        self.stacks = StackCollector(
            self.commander, timeout_s=settings.stack_timeout_s, py_spy=settings.py_spy
        )
        #: Other sidecars' ranks of the same jobs, when a job coordinator is reachable.
        self.job_view = JobView()
        self.engine = Engine(
            self.registry,
            assembly.rule_config(settings),
            assembly.action_policy(settings),
            self.incident_log,
            self.actions,
            clock=clock,
            culprits=CulpritPolicy(settings.on_inconclusive, settings.job_kill_grace_s),
            stacks=self.stacks,
            job_view=self.job_view,
            sidecar_id=sidecar_id or f"{socket.gethostname()}:{os.getpid()}",
            patience=PatienceBook(
                settings.hang_patience_s, replica_setting_s=settings.replica_patience_s
            ),
        )
        self.job_sync = assembly.job_sync(self.engine, killer, settings)
        self.servicer = SidecarServicer(
            self.registry,
            self.commander,
            self.status,
            self.diagnose,
            clock=clock,
            tickets=self.tickets,
            diagnose_ray=self.diagnose_ray,
        )
        self.servicer.shedder.pace = self.engine.pace  # reports' lags, and status reads it
        self.queries = Queries(
            self.registry,
            self.engine,
            self.servicer.shedder,
            clock,
            lambda: self.ray_responder,
            self._job_sync_status,
            lambda: self.job_sync_upstream.status(),
        )
        #: The standard gRPC health service, for kubelet probes.
        checks = self._checks = EngineHealth(self.engine, settings.engine_stall_s, clock=clock)
        self.health = Health(
            checks.ticking,
            checks.workers_ok,
            lambda: not ((load := self.servicer.shedder.load(clock())).overloaded or load.behind),
        )
        #: Serves Relay streams from node sidecars (``--relay-to``) as sessions.
        self.relay = RelayUpstream(self.servicer, clock)
        #: Hosts each job's coordinator for node sidecars with ``job_sync_to``.
        self.job_sync_upstream = JobSyncUpstream(clock, self.servicer.tickets)
        self.servicer.report_listeners.append(RecoveryLog(self.recovery, self.incident_log, clock))
        self.addresses: list[str] = []
        self._servers: list[grpc.aio.Server] = []
        self._stop = asyncio.Event()
        self._engine_task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._hub_task: asyncio.Task[None] | None = None
        #: The Ray watcher's findings as incidents (a RayFindingResponder; its
        #: ``watcher`` once joined), when ``ray_watch`` and ``ray_address`` are set.
        self.ray_responder: Any = None
        self._unix_paths: list[Path] = []
        self.telemetry: Telemetry | None = None

    def status(self, job_id: str = "") -> probe_pb2.StatusReply:
        return self.queries.status(job_id)

    def _job_sync_load(self) -> JobSyncLoad:
        """Summary mode's gauges: the link's state here; the hub's once a node tried."""
        link = self._job_sync_status()
        hub = self.job_sync_upstream.status()
        return JobSyncLoad(
            (link.connected, link.lost) if link is not None else None,
            (hub.nodes, hub.refused, hub.missed_pushes) if hub is not None else None,
            self.job_sync_upstream.ranks_by_job() if hub is not None else {},
        )

    def _hub_episodes(self) -> dict[str, EpisodeNote | None]:
        return {job: s.episode for job, s in self.job_sync_upstream.hub.jobs.items()}

    def _hub_closed(self) -> list[tuple[str, EpisodeNote]]:
        """The closed notes the hub's jobs received since the last call (taken)."""
        out = []
        for job, s in self.job_sync_upstream.hub.jobs.items():
            while s.closed:
                out.append((job, s.closed.popleft()))
        return out

    def _job_sync_status(self) -> probe_pb2.JobSyncLinkStatus | None:
        """This node's stream to its upstream (``job_sync_to``; not Ray's transport)."""
        transport = self.job_sync.transport if self.job_sync is not None else None
        return transport.status() if isinstance(transport, StreamTransport) else None

    async def diagnose(self, job_id: str) -> probe_pb2.DiagnoseReply:
        """See :meth:`Queries.diagnose <trainprobe.sidecar.queries.Queries.diagnose>`."""
        return await self.queries.diagnose(job_id)

    async def diagnose_ray(self, dot: bool) -> probe_pb2.DiagnoseReply:
        return await self.queries.diagnose_ray(dot)

    async def start(self) -> None:
        # Exporters first: a metrics port that cannot be bound fails before we serve.
        self.telemetry = start_telemetry(
            self.settings,
            lambda: self.registry,
            self.clock,
            SIDECAR_VERSION,
            lags=self.registry.arrivals.lags,
        )
        if self.telemetry is not None:
            self.telemetry.ingest = self.servicer.shedder.load
            self.telemetry.job_sync = self._job_sync_load
            self.engine.sinks.append(self.telemetry)
            self.servicer.report_listeners.append(self.telemetry.on_report)
            self.servicer.reclaimer.before.append(self.telemetry.prune)
            self.actions.listeners.append(self.telemetry.on_action)
        try:
            await self._serve()
        except BaseException:
            if self.telemetry is not None:
                await self.telemetry.aclose(timeout_s=1.0)
            raise

    async def _serve(self) -> None:
        self.killer.start()  # e.g. RayKiller connects to Ray in the background
        served = await open_servers(
            self.settings.listen_addresses,
            self.settings.token,
            self.settings.insecure,
            (
                self.servicer.handler({**self.relay.methods(), **self.job_sync_upstream.methods()}),
                self.health.handler(),
            ),
            self.tickets,
            self.settings.socket_access,
            server_tls(self.settings.tls_cert_file, self.settings.tls_key_file),
        )
        self._servers, self.addresses, self._unix_paths = (
            served.servers,
            served.addresses,
            served.unix_paths,
        )
        self.stacks.socket_dirs = [path.parent for path in self._unix_paths]
        if self._unix_paths:  # where verified workers connect: their probe looks there
            self._checks.doomed.files = DoomFiles(self._unix_paths[0].parent)
        self._engine_task = asyncio.ensure_future(
            self.engine.run(
                self.settings.tick_interval_ms / 1000.0, self._stop, self.settings.settle_s
            )
        )
        if self.job_sync is not None:
            self._sync_task = asyncio.ensure_future(self.job_sync.run(self._stop))
        if self.telemetry is not None and self.telemetry.tracing:
            # Summary mode's upstream: one span per job episode its hub holds.
            self._hub_task = asyncio.ensure_future(
                self.telemetry.trace_job_episodes(self._hub_episodes, self._stop, self._hub_closed)
            )
        if self.settings.ray_watch and self.killer.link is not None and self.settings.ray_address:
            from trainprobe.sidecar.ray.responder import RayFindingResponder

            self.ray_responder = RayFindingResponder(
                self.engine, self.settings, self.actions.listeners, self.clock
            )
            self._watch_task = asyncio.ensure_future(
                self.ray_responder.run(self.killer.link, self._stop)
            )
        log.info(
            "trainprobe sidecar %s listening on %s", SIDECAR_VERSION, ", ".join(self.addresses)
        )

    async def stop(self, grace_s: float = 1.0) -> None:
        self._stop.set()
        for task in (self._engine_task, self._sync_task, self._watch_task, self._hub_task):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.job_sync is not None:
            self.job_sync.close()
        await self.tickets.close()
        await asyncio.gather(*(s.stop(grace_s) for s in self._servers))
        await self.engine.drain(timeout_s=grace_s + self.settings.kill_grace_s)
        for path in self._unix_paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(Exception, asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(self.killer.close), 10.0)
        if self.telemetry is not None:
            await self.telemetry.aclose(timeout_s=grace_s + 2.0)
        # Last: the telemetry's close may still log. Joins the writer thread, closes the fd.
        await asyncio.to_thread(self.incident_log.close)

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()
