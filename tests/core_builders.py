"""Hand-made plain data for unit tests of trainprobe.sidecar.core."""

from __future__ import annotations

from collections.abc import Iterable

from trainprobe.sidecar.core.session import (
    Finding,
    HelloData,
    PhaseData,
    Registry,
    ReportData,
    WorkerState,
)

NS = 1_000_000_000


def hello(
    rank: int = 0,
    job: str = "job",
    world: int = 4,
    pid: int | None = None,
    interval_ms: int = 1000,
    host: str = "node-a",
    version: int = 1,
    secret: bytes | None = None,
) -> HelloData:
    """A Hello; by default with a session secret of its own process (pid and host),
    as a real hook sends one, so the same pid and host reconnect as one process."""
    pid = pid if pid is not None else 1000 + rank
    return HelloData(
        protocol_version=version,
        hook_version="test",
        job_id=job,
        rank=rank,
        local_rank=rank,
        world_size=world,
        host=host,
        pid=pid,
        interval_ms=interval_ms,
        session_secret=secret if secret is not None else f"{host}/{pid}".encode(),
    )


def report(
    t_s: float,
    step: int | None = None,
    step_t_s: float | None = None,
    seq: int = 1,
    durations: tuple[float, ...] = (),
    phases: tuple[PhaseData, ...] = (),
    finished: tuple[PhaseData, ...] = (),
    **kw: object,
) -> ReportData:
    """A report sent at worker time ``t_s`` whose last step ended at ``step_t_s``."""
    has = step is not None
    n = len(durations)
    return ReportData(
        seq=seq,
        mono_ns=int(t_s * NS),
        wall_ns=int(1.7e18 + t_s * NS),
        has_step=has,
        last_step=step or 0,
        last_step_mono_ns=int((step_t_s if step_t_s is not None else t_s) * NS) if has else 0,
        total_steps=step or 0,
        step_count=n,
        step_sum_s=sum(durations),
        step_max_s=max(durations, default=0.0),
        active_phases=phases,
        finished_phases=finished,
        recent_steps=tuple(range((step or 0) - n + 1, (step or 0) + 1)) if n else (),
        recent_step_end_mono_ns=tuple(int(t_s * NS) for _ in range(n)),
        recent_step_s=durations,
        **kw,  # type: ignore[arg-type]
    )


def phase(name: str, start_s: float, timeout_s: float = 0.0, end_s: float = 0.0) -> PhaseData:
    return PhaseData(name, int(start_s * NS), timeout_s, int(end_s * NS))


def connected(registry: Registry, rank: int = 0, now: float = 100.0, **kw: object) -> WorkerState:
    """Open a session at sidecar time ``now`` (worker and sidecar clocks agree)."""
    return registry.open(hello(rank=rank, **kw), now)  # type: ignore[arg-type]


def lockstep(
    reg: Registry, ranks: int, until: float, step_s: float = 0.1, t0: float = 100.0
) -> None:
    """Ranks 0..``ranks``-1 connect at ``t0``, then all step and report every
    ``step_s`` until ``until`` (no lag)."""
    workers = [connected(reg, r, t0) for r in range(ranks)]
    t, i = t0, 0
    while t < until - 1e-9:
        i += 1
        t = t0 + i * step_s
        for w in workers:
            reg.apply(w, report(t, step=i, seq=i), t)


def fired(findings: Iterable[Finding]) -> set[tuple[int, str]]:
    """(rank, rule) of each finding."""
    return {(f.key.rank, f.rule) for f in findings}
