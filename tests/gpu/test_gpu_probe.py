"""GPU memory and sync timing on a real NVIDIA GPU (marker ``gpu``).

Run on the device machine (see bench/HISTORY.md for the command); skipped
where CUDA or NVML is missing, as on CI. No Ray or OpenTelemetry here: the
device machine has neither. The process group is NCCL with world size 1 in
this process; sidecars are real processes on private Unix sockets, with
``--on-hung observe`` so that a finding never signals the test process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.support import sidecar, wait_for
from trainprobe.hooks import LivenessProbeHook
from trainprobe.hooks.watch.gpu import GpuMonitor
from trainprobe.proto import probe_pb2


def _nvml() -> object | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


NVML = _nvml()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(NVML is None, reason="needs NVML (nvidia-ml-py and a driver)"),
]
GiB = 1 << 30


@pytest.fixture(scope="module")
def nccl() -> Iterator[None]:
    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda:0")
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def nvml_handle() -> object:
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    return NVML.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")


def mlp(width: int = 2048, depth: int = 4) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers).cuda()


def step(model: nn.Module, x: torch.Tensor, opt: torch.optim.Optimizer | None = None) -> None:
    model(x).pow(2).mean().backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()


def test_a_nvml_and_the_allocator_agree_on_memory_in_use() -> None:
    torch.cuda.init()
    monitor = GpuMonitor(device=0, nvml_interval_s=0.0)
    keep = torch.empty(4 * GiB, dtype=torch.uint8, device="cuda")
    before = probe_pb2.Report()
    monitor.collect(before)
    more = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
    after = probe_pb2.Report()
    monitor.collect(after)
    b, a = before.gpu_memory, after.gpu_memory
    assert a.has_nvml and b.has_nvml
    assert a.device_uuid == NVML.nvmlDeviceGetUUID(nvml_handle())
    assert a.device_total_bytes == NVML.nvmlDeviceGetMemoryInfo(nvml_handle()).total
    assert a.allocated_bytes >= 6 * GiB and a.reserved_bytes >= a.allocated_bytes
    assert a.peak_allocated_bytes >= a.allocated_bytes
    grown_torch = a.reserved_bytes - b.reserved_bytes
    grown_nvml = (a.process_used_bytes or a.device_used_bytes) - (
        b.process_used_bytes or b.device_used_bytes
    )
    assert grown_torch == 2 * GiB
    assert abs(grown_nvml - grown_torch) <= 64 << 20, (grown_nvml, grown_torch)
    if a.process_used_bytes:  # NVML attributes memory to this pid: context + slack on top
        assert a.reserved_bytes <= a.process_used_bytes <= a.reserved_bytes + 2 * GiB
    assert a.device_used_bytes >= a.reserved_bytes
    del keep, more
    torch.cuda.empty_cache()


def test_a_nvml_is_sampled_at_most_once_a_second() -> None:
    monitor = GpuMonitor(device=0)
    reports = [probe_pb2.Report() for _ in range(3)]
    for r in reports:
        monitor.collect(r)
    assert [r.gpu_memory.has_nvml for r in reports] == [True, False, False]
    assert all(r.gpu_memory.reserved_bytes == reports[0].gpu_memory.reserved_bytes for r in reports)
    time.sleep(1.05)
    again = probe_pb2.Report()
    monitor.collect(again)
    assert again.gpu_memory.has_nvml


def test_b_an_allocation_past_the_ratio_makes_a_gpu_memory_finding() -> None:
    torch.cuda.init()
    mem = NVML.nvmlDeviceGetMemoryInfo(nvml_handle())
    # A ratio 4 GiB above what is in use now: an 8 GiB allocation crosses it.
    ratio = (mem.used + 4 * GiB) / mem.total
    with sidecar("--gpu-memory-ratio", f"{ratio:.6f}", "--gpu-memory-reports", "2") as sc:
        hook = LivenessProbeHook(
            target=sc.target, interval_ms=200, job_id="gpu-b", rank=0, world_size=1, cuda_device=0
        )
        try:
            hook.on_step_end()
            wait_for(lambda: hook.connected, 20, what="the hook to connect")
            time.sleep(2.5)  # two NVML samples under the ratio
            assert not [i for i in sc.incidents() if i["rule"] == "gpu_memory"]
            row = sc.status("gpu-b").workers[0]
            assert row.gpu_memory.has_nvml and row.gpu_uuid.startswith("GPU-")
            hog = torch.empty(8 * GiB, dtype=torch.uint8, device="cuda")
            inc = sc.wait_incident(lambda r: r["rule"] == "gpu_memory", timeout_s=15)
            assert inc["verdict"] == "DEGRADED" and inc["action"] == "observe"
            ev = inc["evidence"]["0"]
            assert ev["used_ratio"] >= ratio and ev["reserved_bytes"] >= 8 * GiB
            del hog
        finally:
            hook.close()
    torch.cuda.empty_cache()


def test_c_nccl_buckets_have_positive_latencies_and_unchanged_gradients(nccl: None) -> None:
    x = torch.randn(512, 2048, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    plain = nn.parallel.DistributedDataParallel(mlp(), device_ids=[0], bucket_cap_mb=8)
    watched = nn.parallel.DistributedDataParallel(mlp(), device_ids=[0], bucket_cap_mb=8)
    hook = LivenessProbeHook(
        target="unix:///nonexistent/gpu-c.sock", job_id="gpu-c", rank=0, world_size=1, start=False
    )
    try:
        assert hook.watch_ddp(watched)
        for _ in range(3):
            step(plain, x)
            step(watched, x)
        for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad)
        torch.cuda.synchronize()  # the test waits for the GPU; the hook never does
        report = hook._make_report()
        sync = report.sync
        (group,) = sync.groups
        layout = watched._get_ddp_logging_data()
        first = len(str(layout["bucket_sizes"]).split(","))
        later = len(str(layout.get("rebuilt_bucket_sizes") or layout["bucket_sizes"]).split(","))
        assert group.issued == group.completed == sync.count == first + 2 * later
        assert sync.p50_s > 0 and all(s.end_mono_ns > s.start_mono_ns for s in sync.samples)
        assert report.gpu_memory.device_index == 0 and report.gpu_memory.allocated_bytes > 0
        assert hook._make_hello().gpu_uuid == report.gpu_memory.device_uuid
    finally:
        hook.close()


def cycles_per_second() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)  # warm up
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    return 50_000_000 / (start.elapsed_time(end) / 1000)


def test_d_a_collective_delayed_on_the_gpu_is_seen_in_flight(nccl: None) -> None:
    model = nn.parallel.DistributedDataParallel(mlp(), device_ids=[0])
    x = torch.randn(256, 2048, device="cuda")
    with sidecar("--sync-timeout-s", "1", "--on-hung", "observe") as sc:
        hook = LivenessProbeHook(
            target=sc.target, interval_ms=100, job_id="gpu-d", rank=0, world_size=1
        )
        try:
            assert hook.watch_ddp(model)
            for _ in range(2):
                step(model, x)
                hook.on_step_end()
            rate = cycles_per_second()
            torch.cuda.synchronize()
            wait_for(lambda: hook.connected, 20, what="the hook to connect")
            torch.cuda._sleep(int(4.0 * rate))  # the GPU is busy 4 s; the host is not
            t0 = time.monotonic()
            step(model, x)  # returns at once; the allreduce waits behind the sleep
            assert time.monotonic() - t0 < 1.0, "the step must not wait for the GPU"

            def age() -> float:
                return sc.status("gpu-d").workers[0].inflight_age_s

            first = wait_for(lambda: age() > 0.3 and age(), 5, what="an in-flight bucket")
            later = wait_for(lambda: age() > first + 0.3 and age(), 5, what="a growing age")
            assert later > first
            inc = sc.wait_incident(lambda r: r["rule"] == "sync_inflight", timeout_s=5)
            assert inc["verdict"] == "HUNG" and inc["evidence"]["0"]["op"] == "allreduce"
            assert 1.0 <= inc["detection_latency_s"] < 2.0
            torch.cuda.synchronize()
            time.sleep(0.3)
            (group,) = sc.status("gpu-d").workers[0].groups
            assert group.issued == group.completed and group.oldest_inflight_start_mono_ns == 0
        finally:
            hook.close()


def test_e_the_hook_never_synchronizes_the_host_with_the_device(
    nccl: None, caplog: pytest.LogCaptureFixture
) -> None:
    model = nn.parallel.DistributedDataParallel(mlp(), device_ids=[0], bucket_cap_mb=4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 2048, device="cuda")
    with sidecar() as sc:
        hook = LivenessProbeHook(
            target=sc.target, interval_ms=50, job_id="gpu-e", rank=0, world_size=1
        )
        try:
            assert hook.watch_ddp(model)
            # DDP itself syncs early on: it rebuilds its buckets in step 2 and
            # times its first 10 iterations (then every 100th) for its logger.
            for _ in range(12):
                step(model, x, opt)
                hook.on_step_end()
            torch.cuda.synchronize()
            wait_for(lambda: hook.connected, 20, what="the hook to connect")
            with caplog.at_level(logging.DEBUG, logger="trainprobe.hooks"):
                torch.cuda.set_sync_debug_mode("error")
                try:
                    for _ in range(20):
                        step(model, x, opt)
                        hook.on_step_end()
                        time.sleep(0.02)  # the reporter thread reads events meanwhile
                    time.sleep(0.3)
                    with pytest.raises(RuntimeError):
                        model(x).sum().item()  # the mode is armed: a real sync fails
                finally:
                    torch.cuda.set_sync_debug_mode(0)
            assert not [r for r in caplog.records if "failed" in r.getMessage()]
            torch.cuda.synchronize()
            time.sleep(0.3)
            row = sc.status("gpu-e").workers[0]
            assert row.groups[0].completed >= 32 and row.sync_p50_s > 0
        finally:
            hook.close()
