"""Translation between wire messages and the core's plain data."""

from __future__ import annotations

import dataclasses
from typing import Any

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.model import (
    CollectiveData,
    GpuMemoryData,
    GroupSeqData,
    HelloData,
    PhaseData,
    RayInfo,
    ReportData,
    SyncData,
    WorkerState,
)


def hello_from_pb(m: probe_pb2.Hello) -> HelloData:
    return HelloData(
        protocol_version=m.protocol_version,
        hook_version=m.hook_version,
        job_id=m.job_id,
        rank=m.rank,
        local_rank=m.local_rank,
        world_size=m.world_size,
        host=m.host,
        pid=m.pid,
        # Version-1 hooks that predate the field send 0: assume the default.
        interval_ms=m.interval_ms or 1000,
        ray=RayInfo(
            job_id=m.ray.job_id,
            node_id=m.ray.node_id,
            actor_id=m.ray.actor_id,
            worker_id=m.ray.worker_id,
            run_name=m.ray.trial_or_run_name,
        ),
        gpu_uuid=m.gpu_uuid,
        cuda_device=m.cuda_device if m.gpu_uuid else -1,
        labels=dict(m.labels),
        stack_signal=m.stack_signal,
        stack_file=m.stack_file,
        thread_id=m.thread_id,
        thread_native_id=m.thread_native_id,
    )


def _phase(p: probe_pb2.Phase) -> PhaseData:
    return PhaseData(p.name, p.start_mono_ns, p.timeout_s, p.end_mono_ns)


def _fields(cls: Any, msg: Any) -> dict[str, Any]:
    """The values of ``msg`` for every field of dataclass ``cls`` (same names)."""
    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(cls)}


def _gpu(g: probe_pb2.GpuMemory) -> GpuMemoryData:
    return GpuMemoryData(**_fields(GpuMemoryData, g))


def _sync(s: probe_pb2.SyncStats) -> SyncData:
    return SyncData(
        count=s.count,
        p50_s=s.p50_s,
        max_s=s.max_s,
        bytes=s.bytes,
        sum_s=s.sum_s,
        groups=tuple(GroupSeqData(**_fields(GroupSeqData, g)) for g in s.groups),
        samples=tuple(CollectiveData(**_fields(CollectiveData, c)) for c in s.samples),
    )


def report_from_pb(m: probe_pb2.Report) -> ReportData:
    return ReportData(
        seq=m.seq,
        mono_ns=m.mono_ns,
        wall_ns=m.wall_ns,
        has_step=m.has_step,
        last_step=m.last_step,
        last_step_mono_ns=m.last_step_mono_ns,
        total_steps=m.total_steps,
        step_count=m.step_stats.count,
        step_sum_s=m.step_stats.sum_s,
        step_max_s=m.step_stats.max_s,
        active_phases=tuple(_phase(p) for p in m.active_phases),
        finished_phases=tuple(_phase(p) for p in m.finished_phases),
        dropped_reports=m.dropped_reports,
        recent_steps=tuple(m.recent_steps),
        recent_step_end_mono_ns=tuple(m.recent_step_end_mono_ns),
        recent_step_s=tuple(m.recent_step_s),
        gpu=_gpu(m.gpu_memory) if m.HasField("gpu_memory") else None,
        sync=_sync(m.sync) if m.HasField("sync") else None,
    )


def _gpu_pb(g: GpuMemoryData | None) -> probe_pb2.GpuMemory | None:
    return None if g is None else probe_pb2.GpuMemory(**dataclasses.asdict(g))


def status_pb(w: WorkerState, now: float, stall_threshold_s: float) -> probe_pb2.WorkerStatus:
    """One row of ``trainprobe status``."""
    h = w.hello
    rep = w.last_report
    # Counters from the latest report; latencies from the latest window that
    # had any (a quiet window says nothing about how fast syncs are).
    sync = rep.sync if rep else None
    window = w.sync_window
    inflight = w.oldest_inflight()
    return probe_pb2.WorkerStatus(
        job_id=h.job_id,
        rank=h.rank,
        local_rank=h.local_rank,
        world_size=h.world_size,
        host=h.host,
        pid=h.pid,
        has_step=w.has_step,
        step=w.last_step,
        steps_per_s=w.steps_per_s,
        report_age_s=max(0.0, now - w.last_report_at),
        phase=w.phase_names,
        verdict=w.verdict.value,
        state="connected" if w.connected else (w.ended or "disconnected"),
        step_age_s=max(0.0, now - w.last_step_at) if w.has_step else 0.0,
        stall_threshold_s=stall_threshold_s,
        gpu_memory=_gpu_pb(w.gpu),
        sync_p50_s=window.p50_s if window else 0.0,
        sync_max_s=window.max_s if window else 0.0,
        groups=[probe_pb2.GroupSeq(**dataclasses.asdict(g)) for g in (sync.groups if sync else ())],
        ray=probe_pb2.RayIdentity(
            job_id=h.ray.job_id,
            node_id=h.ray.node_id,
            actor_id=h.ray.actor_id,
            worker_id=h.ray.worker_id,
            trial_or_run_name=h.ray.run_name,
        ),
        gpu_uuid=w.gpu_uuid,
        inflight_age_s=max(0.0, now - inflight[1]) if inflight else 0.0,
    )
