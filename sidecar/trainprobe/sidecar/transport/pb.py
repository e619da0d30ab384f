"""Translation between wire messages and the core's plain data."""

from __future__ import annotations

import dataclasses
from typing import Any

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.session.arrival import LagStats
from trainprobe.sidecar.core.session.model import (
    CollectiveData,
    GpuMemoryData,
    GroupSeqData,
    HelloData,
    PhaseData,
    RayIds,
    ReplicaIdentityData,
    ReplicaProgressData,
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
        ray=RayIds(
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
        session_secret=m.session_secret,
        replica=(
            ReplicaIdentityData(
                m.replica.replica_id[:128], m.replica.group_rank, max(1, m.replica.group_world_size)
            )
            if m.HasField("replica") and m.replica.replica_id
            else None
        ),
        job_name=m.job_name,
        startup_watch=m.startup_watch,
    )


def _phase(p: probe_pb2.Phase) -> PhaseData:
    return PhaseData(p.name, p.start_mono_ns, p.timeout_s, p.end_mono_ns)


def _phases(ps: Any) -> tuple[PhaseData, ...]:
    # Most reports carry no phase: skip building an empty generator for them.
    return tuple(_phase(p) for p in ps) if ps else ()


def _gpu(g: probe_pb2.GpuMemory) -> GpuMemoryData:
    return GpuMemoryData(
        g.device_index,
        g.allocated_bytes,
        g.reserved_bytes,
        g.peak_allocated_bytes,
        g.has_nvml,
        g.device_used_bytes,
        g.device_total_bytes,
        g.process_used_bytes,
        g.device_uuid,
    )


def _group(g: probe_pb2.GroupSeq) -> GroupSeqData:
    return GroupSeqData(
        g.group,
        g.issued,
        g.completed,
        g.oldest_inflight_start_mono_ns,
        g.inflight_op,
        g.inflight_seq,
        # Lists straight from the slice (a tuple copy more cost ~0.3 µs a report).
        g.started_seqs[:] if g.started_seqs else (),
        g.started_mono_ns[:] if g.started_mono_ns else (),
    )


def _sample(c: probe_pb2.CollectiveSample) -> CollectiveData:
    return CollectiveData(c.group, c.seq, c.op, c.bytes, c.start_mono_ns, c.end_mono_ns, c.step)


def _sync(s: probe_pb2.SyncStats) -> SyncData:
    groups, samples = s.groups, s.samples
    return SyncData(
        s.count,
        s.p50_s,
        s.max_s,
        s.bytes,
        s.sum_s,
        tuple(_group(g) for g in groups) if groups else (),
        tuple(_sample(c) for c in samples) if samples else (),
    )


def report_from_pb(m: probe_pb2.Report) -> ReportData:
    """The core's view of one report.

    Runs for every report: positional arguments in :class:`ReportData`'s field
    order cost a third of keywords (bench/bench_report_path.py);
    tests/unit/test_convert.py checks that every field lands where it belongs.
    """
    stats = m.step_stats
    return ReportData(
        m.seq,
        m.mono_ns,
        m.wall_ns,
        m.has_step,
        m.last_step,
        m.last_step_mono_ns,
        m.total_steps,
        stats.count,  # step_count
        stats.sum_s,  # step_sum_s
        stats.max_s,  # step_max_s
        _phases(m.active_phases),
        _phases(m.finished_phases),
        m.dropped_reports,
        # A slice first: copying the upb container to a list is about twice as
        # fast as iterating it (bench/bench_report_path.py).
        tuple(m.recent_steps[:]),
        tuple(m.recent_step_end_mono_ns[:]),
        tuple(m.recent_step_s[:]),
        _gpu(m.gpu_memory) if m.HasField("gpu_memory") else None,
        _sync(m.sync) if m.HasField("sync") else None,
        _replica(m.replica) if m.HasField("replica") else None,
    )


def _replica(r: probe_pb2.ReplicaProgress) -> ReplicaProgressData:
    # Only the three names the hook sends; anything else is not a torchft wait.
    waiting = r.waiting if r.waiting in ("quorum", "allreduce", "commit") else ""
    return ReplicaProgressData(
        r.quorum_id, r.step, r.participants, waiting, r.waiting_since_mono_ns, r.errored
    )


def _gpu_pb(g: GpuMemoryData | None) -> probe_pb2.GpuMemory | None:
    return None if g is None else probe_pb2.GpuMemory(**dataclasses.asdict(g))


def status_pb(
    w: WorkerState, now: float, stall_threshold_s: float, suspect: str = ""
) -> probe_pb2.WorkerStatus:
    """One row of ``trainprobe status``; ``suspect`` is the job's watched hang, if any."""
    h = w.hello
    rep = w.last_report
    # Counters from the latest report; latencies from the latest window that
    # had any (a quiet window says nothing about how fast syncs are).
    sync = rep.sync if rep else None
    window = w.sync_window
    inflight = w.oldest_inflight()
    return probe_pb2.WorkerStatus(
        job_id=h.job_id,
        job_name=h.job_name,
        rank=h.rank,
        local_rank=h.local_rank,
        world_size=h.world_size,
        host=h.host,
        pid=h.pid,
        verified=w.verified,
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
        groups=[_group_status_pb(g) for g in (sync.groups if sync else ())],
        ray=probe_pb2.RayIdentity(
            job_id=h.ray.job_id,
            node_id=h.ray.node_id,
            actor_id=h.ray.actor_id,
            worker_id=h.ray.worker_id,
            trial_or_run_name=h.ray.run_name,
        ),
        gpu_uuid=w.gpu_uuid,
        inflight_age_s=max(0.0, now - inflight[1]) if inflight else 0.0,
        suspect=suspect if not w.killed_rule else "",
        killed_rule=w.killed_rule,
        killed_incident=w.killed_incident,
        arrival_lag=_arrival_pb(w.arrival),
        replica=h.replica.replica_id if h.replica is not None else "",
        evicted=w.evicted,
    )


def _group_status_pb(g: GroupSeqData) -> probe_pb2.GroupSeq:
    # The counters only: issue times are the worker's clock, for the sidecar.
    return probe_pb2.GroupSeq(
        group=g.group,
        issued=g.issued,
        completed=g.completed,
        oldest_inflight_start_mono_ns=g.oldest_inflight_start_mono_ns,
        inflight_op=g.inflight_op,
        inflight_seq=g.inflight_seq,
    )


def _arrival_pb(lag: LagStats | None) -> probe_pb2.ArrivalLag | None:
    if lag is None:
        return None
    s = lag.summary()
    return probe_pb2.ArrivalLag(
        count=s.count,
        last_s=s.last_s,
        p50_s=s.p50_s,
        p99_s=s.p99_s,
        max_s=s.max_s,
        missed=s.missed,
        group=s.group,
    )
