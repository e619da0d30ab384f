"""Wire messages <-> core data: every field survives the trip."""

from __future__ import annotations

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.convert import hello_from_pb, report_from_pb, status_pb
from trainprobe.sidecar.core import Registry


def test_report_with_gpu_and_sync_fields() -> None:
    msg = probe_pb2.Report(
        seq=3,
        mono_ns=5 * 10**9,
        wall_ns=1,
        has_step=True,
        last_step=9,
        last_step_mono_ns=4 * 10**9,
        total_steps=9,
        step_stats=probe_pb2.StepStats(count=2, sum_s=0.5, max_s=0.3),
        active_phases=[probe_pb2.Phase(name="eval", start_mono_ns=10**9, timeout_s=60)],
        recent_steps=[8, 9],
        recent_step_end_mono_ns=[3 * 10**9, 4 * 10**9],
        recent_step_s=[0.2, 0.3],
        gpu_memory=probe_pb2.GpuMemory(
            device_index=1,
            allocated_bytes=10,
            reserved_bytes=20,
            peak_allocated_bytes=15,
            has_nvml=True,
            device_used_bytes=70,
            device_total_bytes=100,
            process_used_bytes=30,
        ),
        sync=probe_pb2.SyncStats(
            count=4,
            p50_s=0.01,
            max_s=0.02,
            bytes=4096,
            sum_s=0.05,
            groups=[
                probe_pb2.GroupSeq(
                    group="default",
                    issued=12,
                    completed=11,
                    oldest_inflight_start_mono_ns=4_500_000_000,
                    inflight_op="allreduce",
                    inflight_seq=12,
                )
            ],
            samples=[
                probe_pb2.CollectiveSample(
                    group="default",
                    seq=11,
                    op="allreduce",
                    bytes=1024,
                    start_mono_ns=1,
                    end_mono_ns=2,
                    step=9,
                )
            ],
        ),
    )
    r = report_from_pb(msg)
    assert r.gpu is not None and r.gpu.used_ratio == 0.7 and r.gpu.process_used_bytes == 30
    assert r.sync is not None and r.sync.groups[0].issued == 12
    assert r.sync.samples[0].step == 9 and r.active_phases[0].timeout_s == 60
    assert report_from_pb(probe_pb2.Report(mono_ns=1)).gpu is None

    reg = Registry()
    w = reg.open(
        hello_from_pb(
            probe_pb2.Hello(
                protocol_version=1, job_id="j", rank=0, world_size=1, pid=42, gpu_uuid="GPU-1"
            )
        ),
        0.0,
    )
    reg.apply(w, r, 5.0)
    row = status_pb(w, 6.0, 30.0)
    assert row.gpu_memory.device_used_bytes == 70 and row.groups[0].inflight_seq == 12
    assert row.sync_p50_s == 0.01 and row.phase == "eval" and row.gpu_uuid == "GPU-1"
    assert row.inflight_age_s == 1.5 and row.step == 9 and row.stall_threshold_s == 30.0
