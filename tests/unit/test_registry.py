"""Sessions, validation and the clock mapping in the registry."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tests.core_builders import connected, hello, phase, report
from trainprobe.sidecar.core.session import (
    CollectiveData,
    GpuMemoryData,
    GroupSeqData,
    Registry,
    RegistryError,
    SyncData,
    ValidationError,
    validate_report,
)
from trainprobe.sidecar.core.session.fold import note_offset

T0 = 100.0


def test_duplicate_rank_of_a_live_process_is_refused() -> None:
    reg = Registry()
    connected(reg, 0, T0, pid=10)
    with pytest.raises(RegistryError) as err:
        reg.open(hello(rank=0, pid=11), T0)
    assert err.value.code == "ALREADY_EXISTS"
    assert "already reported by pid 10" in str(err.value)
    # Another job may use the same rank.
    reg.open(hello(rank=0, pid=12, job="other"), T0)
    assert len(reg) == 2


def test_same_process_reconnecting_keeps_history_and_ignores_stale_close() -> None:
    reg = Registry()
    w = connected(reg, 0, T0, pid=10)
    reg.apply(w, report(T0 + 1, step=7), T0 + 1)
    gen = w.generation
    again = reg.open(hello(rank=0, pid=10), T0 + 2)
    assert again is w and w.generation == gen + 1 and w.last_step == 7
    assert reg.close(w, gen, "vanished", T0 + 3, pid_alive=True) is False  # the old stream
    assert w.connected
    assert reg.close(w, w.generation, "goodbye", T0 + 3, pid_alive=True) is True
    assert not w.connected and w.ended == "goodbye"


def test_a_new_process_takes_over_an_ended_rank() -> None:
    reg = Registry()
    old = connected(reg, 0, T0, pid=10)
    reg.close(old, old.generation, "vanished", T0 + 1, pid_alive=False)
    new = reg.open(hello(rank=0, pid=20), T0 + 2)
    assert new is not old and new.hello.pid == 20 and reg.get(new.key) is new


def test_unknown_protocol_version_is_a_precondition_failure() -> None:
    with pytest.raises(RegistryError) as err:
        Registry().open(hello(version=99), T0)
    assert err.value.code == "FAILED_PRECONDITION"
    assert "protocol_version=99" in str(err.value)


def test_an_announced_stack_signal_and_file_are_accepted() -> None:
    ok = replace(hello(), stack_signal=40, stack_file="/run/tp/stacks-1000.txt")
    assert Registry().open(ok, T0).hello.stack_signal == 40


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"job_id": ""}, "job_id"),
        ({"world_size": 0}, "world_size"),
        ({"rank": 4}, "rank"),
        ({"rank": -1}, "rank"),
        ({"pid": 0}, "pid"),
        ({"interval_ms": 5}, "interval_ms"),
        ({"job_id": "x" * 300}, "job_id"),
        # The sidecar sends stack_signal to the pid and reads stack_file: a
        # real-time signal only, and only the hook's own file.
        ({"stack_signal": 9}, "stack_signal"),
        ({"stack_signal": 19}, "stack_signal"),
        ({"stack_signal": 15}, "stack_signal"),
        ({"stack_signal": 65}, "stack_signal"),
        ({"stack_signal": 33}, "stack_signal"),  # glibc's own, below SIGRTMIN
        ({"stack_file": "/etc/shadow"}, "stack_file"),
        ({"stack_file": "/tmp/stacks-1.txt"}, "stack_file"),  # another pid's
        ({"stack_file": "stacks-1000.txt"}, "stack_file"),  # relative
    ],
)
def test_bad_identity_is_invalid_argument(change: dict, field: str) -> None:
    with pytest.raises(RegistryError) as err:
        Registry().open(replace(hello(), **change), T0)
    assert err.value.code == "INVALID_ARGUMENT"
    assert field in str(err.value)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (replace(report(T0, step=1), last_step=-5), "last_step"),
        (replace(report(T0, step=1), step_sum_s=math.nan), "step_stats.sum_s"),
        (replace(report(T0, step=1), step_max_s=math.inf), "step_stats.max_s"),
        (replace(report(T0, step=1), step_max_s=-1.0), "step_stats.max_s"),
        (replace(report(T0, step=1), mono_ns=0), "mono_ns"),
        (replace(report(T0, step=1), last_step_mono_ns=int((T0 + 5) * 1e9)), "last_step_mono_ns"),
        (
            replace(report(T0, step=3, durations=(0.1,) * 3), recent_step_s=(0.1, math.nan, 0.1)),
            "recent_step_s",
        ),
        (replace(report(T0, step=3, durations=(0.1, 0.1)), recent_steps=(1,)), "equal lengths"),
        (report(T0, phases=(phase("", T0),)), "name"),
        (report(T0, phases=(phase("ckpt", T0, timeout_s=-3),)), "timeout_s"),
        (report(T0, sync=SyncData(groups=(GroupSeqData("g", 1, 2),))), "completed > issued"),
        (
            replace(report(T0, step=2, durations=(0.1, 0.1)), recent_steps=(1, -2)),
            "recent step -2",
        ),
        (
            replace(report(T0, step=2, durations=(0.1, 0.1)), recent_step_s=(0.1, math.inf)),
            "recent_step_s=inf",
        ),
        (report(T0, sync=SyncData(groups=(GroupSeqData("g", 3, 1, 0, "", 4),))), "inflight_seq"),
        (
            report(T0, sync=SyncData(groups=(GroupSeqData("g", 3, 1), GroupSeqData("g", 3, 1)))),
            "appears twice",
        ),
        (
            report(T0, sync=SyncData(samples=(CollectiveData("g", 1, "op", 8, 5, 4),))),
            "end_mono_ns before start_mono_ns",
        ),
        (report(T0, sync=SyncData(p50_s=2.0, max_s=1.0)), "sync.p50_s exceeds"),
        (
            replace(report(T0), gpu=GpuMemoryData(has_nvml=True, device_used_bytes=5)),
            "device_total_bytes must be > 0",
        ),
        (replace(report(T0), gpu=GpuMemoryData(device_uuid="x" * 300)), "device_uuid is 300"),
    ],
)
def test_absurd_reports_are_rejected_naming_the_field(bad: object, field: str) -> None:
    with pytest.raises(ValidationError, match=field.replace("(", r"\(")):
        validate_report(bad)  # type: ignore[arg-type]


def test_a_rejected_report_leaves_state_untouched() -> None:
    reg = Registry()
    w = connected(reg, 0, T0)
    reg.apply(w, report(T0 + 1, step=3), T0 + 1)
    with pytest.raises(ValidationError):
        reg.apply(w, replace(report(T0 + 2, step=4), last_step=-1), T0 + 2)
    assert w.last_step == 3 and w.reports == 1 and w.last_report_at == T0 + 1


def test_step_rate_and_samples() -> None:
    reg = Registry()
    w = connected(reg, 0, T0)
    for i in range(1, 11):
        reg.apply(w, report(T0 + i, step=i * 5, seq=i, durations=(0.2,) * 5), T0 + i)
    assert w.steps_per_s == pytest.approx(5.0)
    assert len(w.step_samples) == 50
    assert w.step_p99_s == pytest.approx(0.2, rel=3e-4)  # step times are kept to 0.021 %


def test_forget_stale_drops_only_old_ended_sessions() -> None:
    reg = Registry(forget_after_s=60)
    a, b = connected(reg, 0, T0), connected(reg, 1, T0)
    reg.close(a, a.generation, "goodbye", T0, pid_alive=False)
    assert reg.forget_stale(T0 + 30) == []
    assert [w.hello.rank for w in reg.forget_stale(T0 + 61)] == [0]
    assert [w.hello.rank for w in reg] == [b.hello.rank]


def test_offset_estimate_is_the_window_minimum_at_every_step() -> None:
    """note_offset keeps the window minimum incrementally; it must equal a full min()."""
    import random

    from trainprobe.sidecar.core.session.model import HelloData, WorkerState

    rng = random.Random(7)
    hello = HelloData(
        protocol_version=1,
        hook_version="t",
        job_id="j",
        rank=0,
        local_rank=0,
        world_size=1,
        host="h",
        pid=1,
        interval_ms=100,
    )
    state = WorkerState(hello=hello, first_seen_at=0.0)
    for i in range(500):
        # Falling, rising and repeated values, so the minimum often leaves the window.
        d = rng.choice([rng.uniform(-1, 1), 0.5 - i * 0.001, 0.25])
        note_offset(state, d)
        assert state.offset_min_s == min(state.offsets)
        assert state.offset_s <= state.offset_min_s  # it rises slowly (note_offset)
