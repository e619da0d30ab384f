"""Wire messages <-> core data: every field survives the trip."""

from __future__ import annotations

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.session import Registry
from trainprobe.sidecar.core.session.model import (
    CollectiveData,
    GpuMemoryData,
    GroupSeqData,
    PhaseData,
    ReportData,
    SyncData,
)
from trainprobe.sidecar.transport.pb import hello_from_pb, report_from_pb, status_pb


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


def test_every_report_field_lands_in_its_place() -> None:
    """``report_from_pb`` builds ReportData positionally: each field gets a distinct value."""
    msg = probe_pb2.Report(
        seq=1,
        mono_ns=2,
        wall_ns=3,
        has_step=True,
        last_step=4,
        last_step_mono_ns=5,
        total_steps=6,
        step_stats=probe_pb2.StepStats(count=7, sum_s=8.5, max_s=9.5),
        active_phases=[probe_pb2.Phase(name="a", start_mono_ns=10, timeout_s=11.5)],
        finished_phases=[probe_pb2.Phase(name="f", start_mono_ns=12, end_mono_ns=13)],
        dropped_reports=14,
        recent_steps=[15],
        recent_step_end_mono_ns=[16],
        recent_step_s=[17.5],
        gpu_memory=probe_pb2.GpuMemory(
            device_index=18,
            allocated_bytes=19,
            reserved_bytes=20,
            peak_allocated_bytes=21,
            has_nvml=True,
            device_used_bytes=22,
            device_total_bytes=23,
            process_used_bytes=24,
            device_uuid="GPU-25",
        ),
        sync=probe_pb2.SyncStats(
            count=26,
            p50_s=27.5,
            max_s=28.5,
            bytes=29,
            sum_s=30.5,
            groups=[
                probe_pb2.GroupSeq(
                    group="g",
                    issued=31,
                    completed=32,
                    oldest_inflight_start_mono_ns=33,
                    inflight_op="op",
                    inflight_seq=34,
                    started_seqs=[40, 41],
                    started_mono_ns=[42, 43],
                )
            ],
            samples=[
                probe_pb2.CollectiveSample(
                    group="s", seq=35, op="o", bytes=36, start_mono_ns=37, end_mono_ns=38, step=39
                )
            ],
        ),
    )
    expected = ReportData(
        seq=1,
        mono_ns=2,
        wall_ns=3,
        has_step=True,
        last_step=4,
        last_step_mono_ns=5,
        total_steps=6,
        step_count=7,
        step_sum_s=8.5,
        step_max_s=9.5,
        active_phases=(PhaseData(name="a", start_mono_ns=10, timeout_s=11.5, end_mono_ns=0),),
        finished_phases=(PhaseData(name="f", start_mono_ns=12, timeout_s=0.0, end_mono_ns=13),),
        dropped_reports=14,
        recent_steps=(15,),
        recent_step_end_mono_ns=(16,),
        recent_step_s=(17.5,),
        gpu=GpuMemoryData(
            device_index=18,
            allocated_bytes=19,
            reserved_bytes=20,
            peak_allocated_bytes=21,
            has_nvml=True,
            device_used_bytes=22,
            device_total_bytes=23,
            process_used_bytes=24,
            device_uuid="GPU-25",
        ),
        sync=SyncData(
            count=26,
            p50_s=27.5,
            max_s=28.5,
            bytes=29,
            sum_s=30.5,
            groups=(
                GroupSeqData(
                    group="g",
                    issued=31,
                    completed=32,
                    oldest_inflight_start_mono_ns=33,
                    inflight_op="op",
                    inflight_seq=34,
                    started_seqs=[40, 41],
                    started_mono_ns=[42, 43],
                ),
            ),
            samples=(
                CollectiveData(
                    group="s", seq=35, op="o", bytes=36, start_mono_ns=37, end_mono_ns=38, step=39
                ),
            ),
        ),
    )
    assert report_from_pb(msg) == expected
    bare = report_from_pb(probe_pb2.Report(mono_ns=1))
    assert bare.active_phases == () and bare.gpu is None and bare.sync is None
