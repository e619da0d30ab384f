"""The pure core for GPU memory and gradient sync: registry folding, the three
rules, validation, conversion and the status row. Time is passed by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.cli.ctl import format_status
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.session import (
    CollectiveData,
    GpuMemoryData,
    GroupSeqData,
    HelloData,
    PhaseData,
    Registry,
    ReportData,
    SyncData,
    ValidationError,
    Verdict,
    WorkerState,
)
from trainprobe.sidecar.transport import pb as convert

GiB = 1 << 30
CFG = RuleConfig(gpu_memory_ratio=0.9, gpu_memory_reports=3, sync_latency_s=5, sync_timeout_s=5)


def hello(rank: int = 0, uuid: str = "") -> HelloData:
    return HelloData(1, "t", "job", rank, rank, 4, "host", 1000 + rank, 100, gpu_uuid=uuid)


def report(t: float, seq: int = 1, **kw: object) -> ReportData:
    """A report sent at worker time ``t`` seconds (the clocks agree in these tests)."""
    base = {"seq": seq, "mono_ns": int(t * 1e9), "wall_ns": 1}
    if kw.pop("stepped", True):
        base.update(has_step=True, last_step=5, last_step_mono_ns=int(t * 1e9), total_steps=5)
    base.update(kw)
    return ReportData(**base)  # type: ignore[arg-type]


def nvml(used_gib: float, total_gib: float = 100, uuid: str = "GPU-1") -> GpuMemoryData:
    return GpuMemoryData(
        allocated_bytes=GiB,
        reserved_bytes=2 * GiB,
        peak_allocated_bytes=GiB,
        has_nvml=True,
        device_used_bytes=int(used_gib * GiB),
        device_total_bytes=int(total_gib * GiB),
        process_used_bytes=3 * GiB,
        device_uuid=uuid,
    )


def allocator_only(reserved_gib: float, uuid: str = "GPU-1") -> GpuMemoryData:
    return GpuMemoryData(
        allocated_bytes=GiB, reserved_bytes=int(reserved_gib * GiB), device_uuid=uuid
    )


def sync(
    *, count: int = 0, max_s: float = 0.0, inflight_start_s: float = 0.0, issued: int = 10
) -> SyncData:
    completed = issued - (1 if inflight_start_s else 0)
    group = GroupSeqData(
        "default",
        issued,
        completed,
        int(inflight_start_s * 1e9),
        "allreduce" if inflight_start_s else "",
        issued if inflight_start_s else 0,
    )
    samples = ()
    if count:
        samples = (CollectiveData("default", 3, "allreduce", 64, 10**9, 10**9 + int(max_s * 1e9)),)
    return SyncData(count, max_s / 2, max_s, 64 * count, max_s, (group,), samples)


def worker(reg: Registry, rank: int = 0, at: float = 100.0) -> WorkerState:
    state = reg.open(hello(rank), at)
    reg.apply(state, report(at), at)
    return state


def rules_fired(reg: Registry, now: float, cfg: RuleConfig = CFG) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for f in evaluate(reg, cfg, now):
        out.setdefault(f.rule, []).append(f.key.rank)
    return out


# -- gpu_memory ----------------------------------------------------------------------


def test_gpu_memory_needs_n_consecutive_nvml_samples_over_the_ratio() -> None:
    reg = Registry()
    w = worker(reg)
    for i, used in enumerate([95, 95]):
        reg.apply(w, report(101 + i, gpu=nvml(used)), 101 + i)
    assert "gpu_memory" not in rules_fired(reg, 103)
    reg.apply(w, report(103, gpu=nvml(92)), 103)
    (f,) = [f for f in evaluate(reg, CFG, 103.1) if f.rule == "gpu_memory"]
    assert f.verdict is Verdict.DEGRADED
    assert f.evidence["used_ratio"] == 0.92 and f.evidence["reports"] == 3
    assert f.evidence["total_bytes"] == 100 * GiB and f.evidence["gpu_uuid"] == "GPU-1"
    reg.apply(w, report(104, gpu=nvml(50)), 104)  # one sample under: the streak ends
    assert "gpu_memory" not in rules_fired(reg, 104.1)


def test_reports_without_a_fresh_nvml_sample_neither_count_nor_break_the_streak() -> None:
    reg = Registry()
    w = worker(reg)
    reg.apply(w, report(101, gpu=nvml(96)), 101)
    for t in (101.2, 101.4, 101.6):
        reg.apply(w, report(t, gpu=allocator_only(7)), t)
    assert "gpu_memory" not in rules_fired(reg, 101.7), "one NVML sample is not three"
    reg.apply(w, report(102, gpu=nvml(96)), 102)
    reg.apply(w, report(102.2, gpu=allocator_only(8)), 102.2)
    reg.apply(w, report(103, gpu=nvml(97)), 103)
    assert rules_fired(reg, 103.1)["gpu_memory"] == [0]


def test_the_latest_nvml_sample_is_kept_with_newer_allocator_figures() -> None:
    reg = Registry()
    w = worker(reg)
    reg.apply(w, report(101, gpu=nvml(40)), 101)
    reg.apply(w, report(101.5, gpu=allocator_only(9)), 101.5)
    assert w.gpu is not None
    assert (w.gpu.reserved_bytes, w.gpu.device_used_bytes) == (9 * GiB, 40 * GiB)
    assert w.gpu.has_nvml and w.gpu_uuid == "GPU-1"
    row = convert.status_pb(w, 101.6, 30.0)
    assert row.gpu_memory.device_used_bytes == 40 * GiB
    assert row.gpu_memory.reserved_bytes == 9 * GiB
    assert row.gpu_uuid == "GPU-1"


def test_a_cpu_worker_has_no_gpu_state() -> None:
    reg = Registry()
    w = worker(reg)
    assert w.gpu is None and w.gpu_uuid == ""
    assert not convert.status_pb(w, 101, 30.0).HasField("gpu_memory")


# -- sync_latency --------------------------------------------------------------------


def test_sync_latency_fires_for_a_slow_window_and_ends_with_it() -> None:
    reg = Registry()
    w = worker(reg)
    reg.apply(w, report(101, sync=sync(count=4, max_s=4.9)), 101)
    assert "sync_latency" not in rules_fired(reg, 101.1)
    reg.apply(w, report(102, sync=sync(count=4, max_s=7.5)), 102)
    (f,) = [f for f in evaluate(reg, CFG, 102.1) if f.rule == "sync_latency"]
    assert f.verdict is Verdict.DEGRADED
    assert f.evidence["max_sync_s"] == 7.5 and f.evidence["threshold_s"] == 5
    assert (f.evidence["group"], f.evidence["op"], f.evidence["seq"]) == ("default", "allreduce", 3)
    reg.apply(w, report(103, sync=sync()), 103)  # a window with no collectives
    assert "sync_latency" not in rules_fired(reg, 103.1)


def test_status_shows_the_last_window_that_had_collectives() -> None:
    reg = Registry()
    w = worker(reg)
    reg.apply(w, report(101, sync=sync(count=3, max_s=0.02)), 101)
    reg.apply(w, report(102, sync=sync(issued=12)), 102)
    row = convert.status_pb(w, 102.1, 30.0)
    assert (row.sync_p50_s, row.sync_max_s) == (0.01, 0.02)
    assert [(g.group, g.issued, g.completed) for g in row.groups] == [("default", 12, 12)]
    assert "10.0/20.0ms" in format_status(probe_pb2.StatusReply(workers=[row]))


# -- sync_inflight -------------------------------------------------------------------


def test_sync_inflight_fires_once_the_oldest_collective_is_older_than_the_timeout() -> None:
    reg = Registry()
    w = worker(reg)
    reg.apply(w, report(101, sync=sync(inflight_start_s=100.5)), 101)
    assert w.oldest_inflight() == ("default", pytest.approx(100.5))
    assert "sync_inflight" not in rules_fired(reg, 105.4)
    (f,) = [f for f in evaluate(reg, CFG, 105.6) if f.rule == "sync_inflight"]
    assert f.verdict is Verdict.HUNG
    assert f.evidence["inflight_age_s"] == pytest.approx(5.1, abs=1e-3)
    assert (f.evidence["op"], f.evidence["seq"], f.evidence["completed"]) == ("allreduce", 10, 9)
    row = convert.status_pb(w, 105.6, 30.0)
    assert row.inflight_age_s == pytest.approx(5.1)
    assert "wait 5s" in format_status(probe_pb2.StatusReply(workers=[row]))
    reg.apply(w, report(106, sync=sync(issued=11)), 106)  # it completed
    assert w.oldest_inflight() is None
    assert "sync_inflight" not in rules_fired(reg, 106.1)


def test_sync_inflight_waits_for_the_first_step() -> None:
    reg = Registry()
    w = reg.open(hello(), 100)
    reg.apply(w, report(101, stepped=False, sync=sync(inflight_start_s=100)), 101)
    assert "sync_inflight" not in rules_fired(reg, 120)


def test_a_phase_on_any_rank_covers_the_wait_and_restarts_the_clock() -> None:
    reg = Registry()
    waiting, saving = worker(reg, 0), worker(reg, 1)
    reg.apply(waiting, report(101, sync=sync(inflight_start_s=100)), 101)
    ckpt = PhaseData("checkpoint", int(100.2e9), 60.0)
    reg.apply(saving, report(101, active_phases=(ckpt,)), 101)
    assert "sync_inflight" not in rules_fired(reg, 110)
    done = replace(ckpt, end_mono_ns=int(110e9))
    reg.apply(saving, report(110.1, seq=2, finished_phases=(done,)), 110.1)
    reg.apply(waiting, report(110.1, seq=2, sync=sync(inflight_start_s=100)), 110.1)
    assert "sync_inflight" not in rules_fired(reg, 114.9)
    assert rules_fired(reg, 115.2)["sync_inflight"] == [0]


def test_the_oldest_group_is_reported_when_several_wait() -> None:
    reg = Registry()
    w = worker(reg)
    groups = (
        GroupSeqData("default", 4, 3, int(102e9), "allreduce", 4),
        GroupSeqData("tp/pg1", 9, 8, int(101e9), "all_gather", 9),
    )
    reg.apply(w, report(103, sync=SyncData(groups=groups)), 103)
    (f,) = [f for f in evaluate(reg, CFG, 106.5) if f.rule == "sync_inflight"]
    assert (f.evidence["group"], f.evidence["op"], f.evidence["seq"]) == ("tp/pg1", "all_gather", 9)


# -- validation and conversion --------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (report(1, gpu=replace(nvml(1), device_used_bytes=200 * GiB)), "device_used_bytes"),
        (report(1, gpu=replace(nvml(1), device_total_bytes=0)), "device_total_bytes"),
        (report(1, gpu=replace(nvml(1), device_index=-2)), "device_index"),
        (report(1, sync=replace(sync(), max_s=float("nan"))), "sync.max_s"),
        (report(1, sync=replace(sync(count=1, max_s=2), p50_s=3)), "p50_s"),
        (
            report(1, sync=SyncData(groups=(GroupSeqData("g", 1, 2),))),
            "completed > issued",
        ),
        (report(1, sync=SyncData(groups=(GroupSeqData("", 1, 1),))), "group must not be empty"),
        (
            report(1, sync=SyncData(groups=(GroupSeqData("g", 1, 1),) * 2)),
            "appears twice",
        ),
        (
            report(1, sync=SyncData(groups=(GroupSeqData("g", 1, 0, 5, "x", 7),))),
            "inflight_seq > issued",
        ),
        (
            report(1, sync=SyncData(samples=(CollectiveData("g", 1, "x", 1, 9, 3),))),
            "before start",
        ),
    ],
)
def test_absurd_gpu_and_sync_input_is_rejected_by_name(bad: ReportData, field: str) -> None:
    reg = Registry()
    w = worker(reg)
    with pytest.raises(ValidationError, match=field.replace("(", r"\(")):
        reg.apply(w, bad, 101)


def test_wire_messages_convert_with_every_field() -> None:
    m = probe_pb2.Report(seq=1, mono_ns=5 * 10**9, wall_ns=1)
    m.gpu_memory.CopyFrom(
        probe_pb2.GpuMemory(
            device_index=3,
            allocated_bytes=1,
            reserved_bytes=2,
            peak_allocated_bytes=3,
            has_nvml=True,
            device_used_bytes=4,
            device_total_bytes=5,
            process_used_bytes=6,
            device_uuid="GPU-x",
        )
    )
    m.sync.count, m.sync.p50_s, m.sync.max_s, m.sync.bytes, m.sync.sum_s = 2, 0.1, 0.2, 8, 0.3
    m.sync.groups.add(group="default", issued=9, completed=8, oldest_inflight_start_mono_ns=7,
                      inflight_op="allreduce", inflight_seq=9)  # fmt: skip
    m.sync.samples.add(group="default", seq=8, op="allreduce", bytes=4, start_mono_ns=1,
                       end_mono_ns=2, step=3)  # fmt: skip
    r = convert.report_from_pb(m)
    assert r.gpu == GpuMemoryData(3, 1, 2, 3, True, 4, 5, 6, "GPU-x")
    assert r.sync == SyncData(
        2,
        0.1,
        0.2,
        8,
        0.3,
        (GroupSeqData("default", 9, 8, 7, "allreduce", 9),),
        (CollectiveData("default", 8, "allreduce", 4, 1, 2, 3),),
    )
    empty = convert.report_from_pb(probe_pb2.Report(seq=1, mono_ns=1, wall_ns=1))
    assert empty.gpu is None and empty.sync is None, "an old hook's report has neither"
