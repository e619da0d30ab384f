"""Hand-made workers and reports for unit tests of trainprobe.sidecar.otel."""

from __future__ import annotations

from trainprobe.sidecar.core.session.model import (
    CollectiveData,
    HelloData,
    PhaseData,
    ReportData,
    SyncData,
)
from trainprobe.sidecar.core.session.registry import Registry

MS = 1_000_000
T0 = 1_000_000 * MS  # worker monotonic ns of the first step's start
WMM = 1.7e9  # sidecar wall - monotonic, seconds


def hello(rank: int = 0, pid: int = 4242, job: str = "jobA", **kw: object) -> HelloData:
    return HelloData(
        protocol_version=1,
        hook_version="t",
        job_id=job,
        rank=rank,
        local_rank=rank,
        world_size=2,
        host="nodeA",
        pid=pid,
        **kw,  # type: ignore[arg-type]
    )


def report(
    seq: int,
    steps: list[int],
    step_ms: float = 10.0,
    first_end_ns: int | None = None,
    samples: tuple[CollectiveData, ...] = (),
    finished: tuple[PhaseData, ...] = (),
) -> ReportData:
    """Steps of ``step_ms`` each, back to back; step k ends at T0 + k*step_ms."""
    ends = [T0 + round(s * step_ms * MS) for s in steps]
    return ReportData(
        seq=seq,
        mono_ns=(ends[-1] if ends else T0) + 1 * MS,
        wall_ns=0,
        has_step=bool(steps),
        last_step=steps[-1] if steps else 0,
        last_step_mono_ns=ends[-1] if ends else 0,
        total_steps=steps[-1] if steps else 0,
        recent_steps=tuple(steps),
        recent_step_end_mono_ns=tuple(ends),
        recent_step_s=tuple(step_ms / 1000 for _ in steps),
        sync=SyncData(count=len(samples), samples=samples) if samples else None,
        finished_phases=finished,
    )


def coll(step: int, seq: int, start_ms: float, dur_ms: float, step_ms: float = 10.0):
    """A collective starting ``start_ms`` into ``step`` (which began at (step-1)*step_ms)."""
    start = T0 + round(((step - 1) * step_ms + start_ms) * MS)
    return CollectiveData("dp", seq, "allreduce", 4096, start, start + round(dur_ms * MS), step)


def apply(reg: Registry, h: HelloData, r: ReportData, now: float = 100.0):
    state = reg.get(h.key) or reg.open(h, now)
    reg.apply(state, r, now)
    return state
