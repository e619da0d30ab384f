"""Assembles a sidecar from its settings and serves it on grpc.aio."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from trainprobe.proto import VERSION, probe_pb2
from trainprobe.sidecar.act.actions import Actions, RecoveryLog
from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.act.killers import Killer, KillerFactory, SignalKiller
from trainprobe.sidecar.act.stacks import StackCollector
from trainprobe.sidecar.config.settings import Settings
from trainprobe.sidecar.core.episodes import CulpritPolicy
from trainprobe.sidecar.core.jobnames import job_label, names_of, resolve_job
from trainprobe.sidecar.core.jobview import JobView
from trainprobe.sidecar.core.limits import MAX_DIAGNOSE_CHARS, MAX_STATUS_BYTES
from trainprobe.sidecar.core.patience import PatienceBook
from trainprobe.sidecar.core.policy import ActionPolicy
from trainprobe.sidecar.core.recovery import RecoveryWatch
from trainprobe.sidecar.core.registry import Registry
from trainprobe.sidecar.core.rules import RuleConfig
from trainprobe.sidecar.core.thresholds import StallPolicy
from trainprobe.sidecar.engine.loop import Engine
from trainprobe.sidecar.otel import Telemetry, start_telemetry
from trainprobe.sidecar.relay.upstream import RelayUpstream
from trainprobe.sidecar.transport.commander import Commander
from trainprobe.sidecar.transport.doom_files import DoomFiles
from trainprobe.sidecar.transport.health import EngineHealth, Health
from trainprobe.sidecar.transport.identity import TicketDesk
from trainprobe.sidecar.transport.pb import status_pb
from trainprobe.sidecar.transport.servicer import SidecarServicer

# ListenError is re-exported: callers catch it from here.
from trainprobe.sidecar.transport.sockets import (  # noqa: F401
    ListenError,
    open_servers,
    server_tls,
)

log = logging.getLogger("trainprobe.sidecar")
SIDECAR_VERSION = VERSION


def rule_config(s: Settings) -> RuleConfig:
    return RuleConfig(
        heartbeat_timeout_s=s.heartbeat_timeout_s,
        stall=StallPolicy(
            timeout_s=s.stall_timeout_s,
            floor_s=s.stall_floor_s,
            p99_factor=s.stall_p99_factor,
            warmup_steps=s.stall_warmup_steps,
            startup_timeout_s=s.startup_timeout_s,
        ),
        phase_timeout_s=s.phase_timeout_s,
        gpu_memory_ratio=s.gpu_memory_ratio,
        gpu_memory_reports=s.gpu_memory_reports,
        sync_latency_s=s.sync_latency_s,
        sync_timeout_s=s.sync_timeout_s,
        init_straggler_s=s.init_straggler_s,
        rendezvous_timeout_s=s.rendezvous_timeout_s,
    )


def action_policy(s: Settings) -> ActionPolicy:
    return ActionPolicy(
        on_hung=s.on_hung,
        on_unresponsive=s.on_unresponsive,
        on_degraded=s.on_degraded,
        dry_run=s.dry_run,
        max_kills_per_hour=s.max_kills_per_hour,
    )


def default_killer(ray_address: str | None, ray_timeout_s: float, commander: Commander) -> Killer:
    """Signals, or Ray first when ``ray_address`` is set (Ray is imported lazily)."""
    if not ray_address:
        return SignalKiller(commander)
    from trainprobe.sidecar.ray.killer import RayKiller
    from trainprobe.sidecar.ray.link import RayLink

    link = RayLink(ray_address, timeout_s=ray_timeout_s)
    return RayKiller(link, SignalKiller(commander), timeout_s=ray_timeout_s)


def _job_sync(engine: Engine, killer: Killer, settings: Settings) -> Any:
    """A :class:`~trainprobe.sidecar.ray.jobsync.JobSync` when this sidecar talks to Ray.

    A killer with a Ray link (per-node sidecars, ``--ray-address``) can reach
    the jobs' coordinators; without Ray, one sidecar serves a whole job.
    """
    link = killer.link
    if link is None:
        return None
    from trainprobe.sidecar.ray.jobsync import JobSync

    return JobSync(
        engine,
        link,
        interval_s=settings.job_sync_interval_ms / 1000.0,
        timeout_s=settings.ray_timeout_s,
    )


def bounded_diagnosis(job_id: str, text: str, as_json: str) -> probe_pb2.DiagnoseReply:
    """A Diagnose reply within :data:`MAX_DIAGNOSE_CHARS` for its text and its JSON.

    Text is cut with a note; JSON too long is replaced by a short object that
    says so, since a cut document would not parse.
    """
    cut = 0
    if len(text) > MAX_DIAGNOSE_CHARS:
        cut += len(text) - MAX_DIAGNOSE_CHARS
        text = (
            text[:MAX_DIAGNOSE_CHARS] + f"\n... ({len(text) - MAX_DIAGNOSE_CHARS} characters cut)"
        )
    if len(as_json) > MAX_DIAGNOSE_CHARS:
        cut += len(as_json)
        as_json = json.dumps(
            {
                "job_id": job_id,
                "truncated": True,
                "error": f"the analysis is {len(as_json)} characters of JSON, over the "
                f"{MAX_DIAGNOSE_CHARS} a reply carries; see the incident log",
            }
        )
    return probe_pb2.DiagnoseReply(job_id=job_id, text=text, json=as_json, truncated_chars=cut)


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
                else default_killer(settings.ray_address, settings.ray_timeout_s, self.commander)
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
            rule_config(settings),
            action_policy(settings),
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
        self.job_sync = _job_sync(self.engine, killer, settings)
        self.servicer = SidecarServicer(
            self.registry,
            self.commander,
            self.status,
            self.diagnose,
            clock=clock,
            tickets=self.tickets,
            diagnose_ray=self.diagnose_ray,
        )
        #: The standard gRPC health service, for kubelet probes.
        checks = self._checks = EngineHealth(self.engine, settings.engine_stall_s, clock=clock)
        self.health = Health(
            checks.ticking,
            checks.workers_ok,
            lambda: not self.servicer.shedder.load(clock()).overloaded,
        )
        #: Serves Relay streams from node sidecars (``--relay-to``) as sessions.
        self.relay = RelayUpstream(self.servicer, clock)
        self.servicer.report_listeners.append(RecoveryLog(self.recovery, self.incident_log, clock))
        self.addresses: list[str] = []
        self._servers: list[grpc.aio.Server] = []
        self._stop = asyncio.Event()
        self._engine_task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        #: The Ray watcher's findings as incidents (a RayFindingResponder; its
        #: ``watcher`` once joined), when ``ray_watch`` and ``ray_address`` are set.
        self.ray_responder: Any = None
        self._unix_paths: list[Path] = []
        self.telemetry: Telemetry | None = None

    def status(self, job_id: str = "") -> probe_pb2.StatusReply:
        now = self.clock()
        thresholds: dict[str, float] = {}
        rows = []
        size = omitted = 0
        # A name stands for its job (one id; AmbiguousJob, a LookupError, for several).
        job_id = resolve_job(job_id, self._job_names()) if job_id else ""
        for w in sorted(self.registry, key=lambda w: (w.hello.job_id, w.hello.rank)):
            if job_id and job_id != w.hello.job_id:
                continue
            if size > MAX_STATUS_BYTES:
                omitted += 1  # counted, not built: a huge registry costs no rows
                continue
            job = w.hello.job_id
            if job not in thresholds:
                thresholds[job] = self.engine.stall_threshold_s(job)
            ep = self.engine.episode(job)
            suspect = ep.suspect if ep is not None and not ep.acted else ""
            row = status_pb(w, now, thresholds[job], suspect)
            size += row.ByteSize()
            if size > MAX_STATUS_BYTES:
                omitted += 1
                continue
            rows.append(row)
        reply = probe_pb2.StatusReply(
            workers=rows,
            sidecar_version=SIDECAR_VERSION,
            node=socket.gethostname(),
            omitted=omitted,
        )
        load = self.servicer.shedder.load(now)
        reply.ingest.CopyFrom(
            probe_pb2.IngestStatus(
                overloaded=load.overloaded,
                applied=load.applied,
                shed=load.shed,
                max_lag_s=load.max_lag_s,
                shed_per_s=load.shed_per_s,
            )
        )
        if self.ray_responder is not None:
            reply.ray_watch.CopyFrom(self.ray_responder.status())
        return reply

    def _job_names(self) -> dict[str, str]:
        """id -> name of every job with a session here ('' where unnamed)."""
        return names_of((w.hello.job_id, w.hello.job_name) for w in self.registry)

    async def diagnose_ray(self, dot: bool) -> probe_pb2.DiagnoseReply:
        """``diagnose --ray``: the Ray watcher's last wait graph (rendered off the loop)."""
        if self.ray_responder is None:
            raise RuntimeError(
                "this sidecar runs no Ray watcher (it runs with --ray-address and ray_watch on)"
            )
        return await asyncio.to_thread(self.ray_responder.diagnose, dot)

    async def diagnose(self, job_id: str) -> probe_pb2.DiagnoseReply:
        """The current culprit analysis of a job (LookupError if none of it reported here).

        Without a job id, the only job this sidecar serves. A job's name
        (``job_name``) stands for its id when one job has it.
        """
        names = self._job_names()
        if not job_id:
            if not names:
                raise LookupError("no worker has reported to this sidecar yet")
            # A finished job (no rank connected, no open episode) is not counted:
            # it stays in status as finished, and --job still reaches it.
            live = sorted(
                {w.hello.job_id for w in self.registry if w.connected}
                | {j for j in names if self.engine.episode(j) is not None}
            )
            jobs = live or sorted(names)
            if len(jobs) > 1:
                shown = ", ".join(job_label(j, names.get(j, "")) for j in jobs[:5])
                more = ", ..." if len(jobs) > 5 else ""
                running = "running " if live else ""
                raise LookupError(
                    f"this sidecar serves {len(jobs)} {running}jobs ({shown}{more}): pass --job"
                )
            job_id = jobs[0]
        else:
            job_id = resolve_job(job_id, names)
        diag, episode = self.engine.diagnose(job_id)
        record = {"job_id": job_id, **diag.to_record(), "episode": episode.id if episode else None}
        return bounded_diagnosis(job_id, diag.text, json.dumps(record, default=str))

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
            (self.servicer.handler(self.relay.methods()), self.health.handler()),
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
        for task in (self._engine_task, self._sync_task, self._watch_task):
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
