"""watch_ddp, wrap_comm_hook and collective() on a real (one-rank, gloo) DDP model.

The process group lives in this test process (an in-memory HashStore, no
network); the fixture tears it down. Multi-rank behaviour, the sidecar and the
bit-identity at world size 3 are in tests/test_e2e_sync.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from trainprobe.hooks import LivenessProbeHook, group_label
from trainprobe.proto import probe_pb2


@pytest.fixture(scope="module")
def world() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def probe(world: None) -> Iterator[LivenessProbeHook]:
    # No reporter thread: the test builds reports itself, as that thread would.
    hook = LivenessProbeHook(
        target="unix:///nonexistent/trainprobe.sock", job_id="t", rank=0, world_size=1, start=False
    )
    yield hook
    hook.close()


def make_model(bucket_cap_mb: float = 0.001) -> nn.parallel.DistributedDataParallel:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 8))
    return nn.parallel.DistributedDataParallel(module, bucket_cap_mb=bucket_cap_mb)


def train(
    model: nn.Module, steps: int, hook: LivenessProbeHook | None = None
) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads: list[torch.Tensor] = []
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(16, 32, generator=gen)).pow(2).mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        if hook is not None:
            hook.on_step_end()
    return grads


def sync_of(hook: LivenessProbeHook) -> probe_pb2.SyncStats:
    report = hook._make_report()
    assert report.HasField("sync")
    return report.sync


def test_watched_model_counts_and_times_every_bucket(probe: LivenessProbeHook) -> None:
    model = make_model()
    assert probe.watch_ddp(model) is True
    train(model, 4, probe)
    sync = sync_of(probe)
    (group,) = sync.groups
    assert group.group == "default"
    # DDP reduces its initial buckets in step 1 and rebuilt ones afterwards.
    layout = model._get_ddp_logging_data()
    first = len(str(layout["bucket_sizes"]).split(","))
    later = len(str(layout["rebuilt_bucket_sizes"]).split(","))
    assert later > 1
    assert group.issued == group.completed == first + 3 * later
    assert sync.count == group.completed
    assert 0 < sync.p50_s <= sync.max_s < 5
    assert sync.bytes > 0
    assert [s.op for s in sync.samples] == ["allreduce"] * len(sync.samples)
    assert {s.step for s in sync.samples} <= {1, 2, 3, 4}
    assert all(s.end_mono_ns > s.start_mono_ns > 0 for s in sync.samples)
    # The window is consumed: a quiet report has counters but no latencies.
    quiet = sync_of(probe)
    assert quiet.count == 0 and quiet.groups[0].issued == group.issued


def test_gradients_are_bit_identical_with_and_without_the_hook(probe: LivenessProbeHook) -> None:
    plain = train(make_model(), 5)
    watched_model = make_model()
    assert probe.watch_ddp(watched_model)
    watched = train(watched_model, 5, probe)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))


def test_a_users_hook_is_composed_not_replaced(probe: LivenessProbeHook) -> None:
    direct = make_model()
    direct.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    expected = train(direct, 3)
    composed = make_model()
    assert probe.watch_ddp(composed, comm_hook=default_hooks.fp16_compress_hook)
    got = train(composed, 3, probe)
    # fp16 compression changes gradients: equality proves the user's hook ran.
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(expected, train(make_model(), 3), strict=True))
    sync = sync_of(probe)
    assert {s.op for s in sync.samples} == {"fp16_compress_hook"}
    assert sync.groups[0].issued == sync.groups[0].completed > 0


def test_an_already_registered_hook_is_explained_and_left_alone(
    probe: LivenessProbeHook, caplog: pytest.LogCaptureFixture
) -> None:
    model = make_model()
    model.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
    with caplog.at_level(logging.WARNING, logger="trainprobe.hooks"):
        assert probe.watch_ddp(model) is False
    assert "already has the comm hook allreduce_hook" in caplog.text
    assert "watch_ddp(model, comm_hook=" in caplog.text
    assert len(model._comm_hooks) == 1
    train(model, 2, probe)  # training is unaffected
    assert not probe._make_report().HasField("sync")


def test_a_builtin_cpp_hook_is_detected(probe: LivenessProbeHook) -> None:
    model = make_model()
    model._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    assert probe.watch_ddp(model) is False
    train(model, 1)


def test_watching_twice_is_harmless_and_non_ddp_is_refused(probe: LivenessProbeHook) -> None:
    model = make_model()
    assert probe.watch_ddp(model) and probe.watch_ddp(model)
    assert len(model._comm_hooks) == 1
    assert probe.watch_ddp(nn.Linear(2, 2)) is False


def test_wrap_comm_hook_for_frameworks_that_register_it(probe: LivenessProbeHook) -> None:
    model = make_model()
    model.register_comm_hook(
        dist.group.WORLD, probe.wrap_comm_hook(default_hooks.allreduce_hook, group="dp")
    )
    train(model, 2, probe)
    sync = sync_of(probe)
    assert [g.group for g in sync.groups] == ["dp"]
    assert sync.groups[0].completed > 0


def test_user_collectives_share_the_groups_sequence(probe: LivenessProbeHook) -> None:
    model = make_model(bucket_cap_mb=25)
    assert probe.watch_ddp(model)
    train(model, 1, probe)
    with probe.collective("metrics", nbytes=4):
        dist.all_reduce(torch.ones(1))
    sub = dist.new_group([0], group_desc="tp")
    with probe.collective("tp_gather", group=sub):
        dist.all_reduce(torch.ones(1), group=sub)
    sync = sync_of(probe)
    groups = {g.group: g for g in sync.groups}
    assert set(groups) == {"default", f"tp/pg{sub.group_name}"}
    assert groups["default"].issued == groups["default"].completed == 2
    assert groups[f"tp/pg{sub.group_name}"].issued == 1
    by_op = {s.op: s for s in sync.samples}
    assert by_op["metrics"].seq == 2 and by_op["metrics"].bytes == 4
    assert by_op["allreduce"].seq == 1


def test_an_open_collective_is_in_flight_with_its_age(probe: LivenessProbeHook) -> None:
    probe.on_step_end()
    entered, release = threading.Event(), threading.Event()

    def user_code() -> None:
        with probe.collective("slow_barrier", group="ctl"):
            entered.set()
            release.wait(10)

    worker = threading.Thread(target=user_code)
    worker.start()
    try:
        assert entered.wait(10)
        time.sleep(0.2)
        (group,) = sync_of(probe).groups
        assert (group.issued, group.completed) == (1, 0)
        assert (group.inflight_op, group.inflight_seq) == ("slow_barrier", 1)
        age_s = (time.monotonic_ns() - group.oldest_inflight_start_mono_ns) / 1e9
        assert 0.2 <= age_s < 5
    finally:
        release.set()
        worker.join()
    done = sync_of(probe)
    assert done.groups[0].completed == 1 and done.groups[0].oldest_inflight_start_mono_ns == 0
    assert 0.2 <= done.max_s < 10
    assert done.samples[0].step == 2  # issued during the second step


def test_collective_never_raises_and_keeps_the_users_exception(
    probe: LivenessProbeHook,
) -> None:
    with pytest.raises(KeyError), probe.collective("boom", group=object(), nbytes=-1):
        raise KeyError("from user code")
    (group,) = sync_of(probe).groups
    assert group.completed == group.issued == 1


def test_group_labels_are_the_same_on_every_rank_by_construction(world: None) -> None:
    assert group_label(None) == "default"
    assert group_label(dist.group.WORLD) == "default"
    assert group_label("experts") == "experts"
    plain = dist.new_group([0])
    assert group_label(plain) == f"pg{plain.group_name}"


def test_no_gpu_and_no_collectives_leave_the_fields_absent(
    probe: LivenessProbeHook, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="trainprobe.hooks"):
        reports = [probe._make_report() for _ in range(5)]
        hello = probe._make_hello()
    assert not any(r.HasField("gpu_memory") or r.HasField("sync") for r in reports)
    assert hello.gpu_uuid == "" and hello.cuda_device == -1
    gpu_lines = [r for r in caplog.records if "CUDA" in r.getMessage() or "NVML" in r.getMessage()]
    assert len(gpu_lines) <= 1
