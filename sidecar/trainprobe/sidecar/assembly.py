"""What the settings make of each part: the core's configurations, the killer,
the job sync (Ray's coordinators, or a ``job_sync_to`` upstream).

The one place where :class:`~trainprobe.sidecar.config.settings.Settings`
becomes the plain objects the core takes (:class:`RuleConfig`,
:class:`ActionPolicy`), so the core never reads settings and each option
reaches its rule through exactly one line here. The killer and the job sync
depend on whether the sidecar talks to Ray: without ``ray_address`` signals
do the work and one sidecar serves a whole job; with it, Ray is imported
(lazily, only then) to kill through its actors and to reach the jobs'
coordinators.
"""

from __future__ import annotations

from typing import Any

from trainprobe.sidecar.act.killers import Killer, SignalKiller
from trainprobe.sidecar.config.settings import Settings
from trainprobe.sidecar.core.incident.policy import ActionPolicy
from trainprobe.sidecar.core.judge.rules import RuleConfig
from trainprobe.sidecar.core.session.thresholds import StallPolicy
from trainprobe.sidecar.engine.loop import Engine
from trainprobe.sidecar.transport.commander import Commander

__all__ = ["action_policy", "default_killer", "job_sync", "rule_config"]


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


def job_sync(engine: Engine, killer: Killer, settings: Settings) -> Any:
    """A :class:`~trainprobe.sidecar.sync.node.JobSync` when this sidecar shares its jobs.

    Outside Ray with ``job_sync_to``: one JobSync stream to that upstream. A
    killer with a Ray link (per-node sidecars, ``--ray-address``) reaches the
    jobs' coordinator actors. Otherwise one sidecar serves a whole job.
    """
    from trainprobe.sidecar.core.job.digest import refresh_s
    from trainprobe.sidecar.sync.node import JobSync

    refresh = refresh_s(settings.heartbeat_timeout_s)
    transport: Any
    if settings.job_sync_to:
        from trainprobe.proto import parse_endpoint
        from trainprobe.sidecar.sync.link import StreamTransport

        transport = StreamTransport(
            parse_endpoint(settings.job_sync_to),
            settings.token,
            settings.relay_tls_cert_file,
            engine.sidecar_id,
            refresh,
            engine.job_view,
        )
    elif killer.link is not None:
        from trainprobe.sidecar.ray.jobsync import RayTransport

        transport = RayTransport(
            killer.link, engine.sidecar_id, refresh, settings.ray_timeout_s, engine.job_view
        )
    else:
        return None
    return JobSync(
        engine,
        transport,
        interval_s=settings.job_sync_interval_ms / 1000.0,
        timeout_s=settings.ray_timeout_s,
    )
