"""The rules, driven by hand-made state and an explicit clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.core_builders import connected, fired, phase, report
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.session import (
    GpuMemoryData,
    GroupSeqData,
    Registry,
    StallPolicy,
    SyncData,
    Verdict,
)

T0 = 100.0  # sidecar and worker clocks agree in these tests (offset 0)


def stepping(reg: Registry, rank: int, steps: int, step_s: float, t0: float = T0) -> float:
    """Feed ``steps`` steps of ``step_s`` each, one report per step; return the time."""
    w = reg.get(connected(reg, rank, t0).key)
    t = t0
    for i in range(1, steps + 1):
        t = t0 + i * step_s
        reg.apply(w, report(t, step=i, seq=i, durations=(step_s,) if i > 1 else ()), t)
    return t


def test_heartbeat_fires_after_timeout_and_not_before() -> None:
    reg = Registry()
    w = connected(reg, 0, T0)
    reg.apply(w, report(T0, step=1), T0)
    cfg = RuleConfig(heartbeat_timeout_s=10)
    assert evaluate(reg, cfg, T0 + 9.9) == []
    found = evaluate(reg, cfg, T0 + 10.1)
    assert fired(found) == {(0, "heartbeat")}
    assert found[0].verdict is Verdict.UNRESPONSIVE
    assert found[0].evidence["report_age_s"] > 10


def test_heartbeat_limit_is_at_least_three_intervals() -> None:
    reg = Registry()
    w = connected(reg, 0, T0, interval_ms=5000)
    reg.apply(w, report(T0, step=1), T0)
    assert evaluate(reg, RuleConfig(heartbeat_timeout_s=10), T0 + 14) == []
    assert fired(evaluate(reg, RuleConfig(heartbeat_timeout_s=10), T0 + 15.1)) == {(0, "heartbeat")}


def test_a_relayed_rank_is_judged_by_its_nodes_batch_interval() -> None:
    # A node batching every 4 s hands over its ranks' reports that often: silence
    # and a still step count between two batches are the wait, not the rank.
    def judged(relay_ms: int, at: float) -> set[tuple[int, str]]:
        reg = Registry()
        t = stepping(reg, 0, 5, 1.0)
        w = reg.get(next(iter(reg)).key)
        w.relay_interval_ms = relay_ms
        cfg = RuleConfig(heartbeat_timeout_s=3, stall=StallPolicy(timeout_s=3))
        return fired(evaluate(reg, cfg, t + at))

    assert judged(0, 3.5) == {(0, "heartbeat")}  # a direct stream: silent
    assert judged(4000, 3.5) == set()  # relayed every 4 s: the next batch is due
    assert judged(4000, 4.9) == set()  # the stall counts from the batch's due time
    assert judged(4000, 12.1) == {(0, "heartbeat")}  # three batches missed
    # A stall (steps stop, reports go on) is still found, one batch interval later.
    reg = Registry()
    t = stepping(reg, 0, 5, 1.0)
    w = reg.get(next(iter(reg)).key)
    w.relay_interval_ms = 4000
    reg.apply(w, report(t + 8, step=5, step_t_s=t, seq=99), t + 8)
    cfg = RuleConfig(heartbeat_timeout_s=3, stall=StallPolicy(timeout_s=3))
    assert fired(evaluate(reg, cfg, t + 6.9)) == set()
    assert fired(evaluate(reg, cfg, t + 8.1)) == {(0, "stall")}


def test_explicit_stall_fires_only_when_steps_stop() -> None:
    reg = Registry()
    t = stepping(reg, 0, 5, 1.0)
    cfg = RuleConfig(stall=StallPolicy(timeout_s=30))
    w = reg.get(next(iter(reg)).key)
    reg.apply(w, report(t + 29, step=5, step_t_s=t, seq=99), t + 29)
    assert evaluate(reg, cfg, t + 29.9) == []
    found = evaluate(reg, cfg, t + 30.1)
    assert fired(found) == {(0, "stall")}
    assert found[0].verdict is Verdict.HUNG
    assert found[0].evidence["basis"] == "explicit"
    assert found[0].evidence["step"] == 5


def test_auto_stall_uses_startup_timeout_during_warmup_then_floor_and_p99() -> None:
    policy = StallPolicy(floor_s=30, p99_factor=10, warmup_steps=20, startup_timeout_s=600)
    cfg = RuleConfig(stall=policy, heartbeat_timeout_s=1e6)
    reg = Registry()
    t = stepping(reg, 0, 10, 0.1)  # 9 samples: still warming up
    assert evaluate(reg, cfg, t + 100) == []  # 100 s stall is fine during warm-up
    assert fired(evaluate(reg, cfg, t + 600.5)) == {(0, "stall")}

    reg = Registry()
    t = stepping(reg, 0, 30, 0.1)  # fast steps: the 30 s floor applies
    assert evaluate(reg, cfg, t + 29) == []
    found = evaluate(reg, cfg, t + 30.5)
    assert found[0].evidence["basis"] == "auto"
    assert found[0].evidence["threshold_s"] == 30

    reg = Registry()
    t = stepping(reg, 0, 30, 5.0)  # slow steps: 10 x p99 = 50 s
    assert evaluate(reg, cfg, t + 45) == []
    found = evaluate(reg, cfg, t + 50.5)
    assert found[0].evidence["threshold_s"] == pytest.approx(50, rel=3e-4)  # kept to 0.021 %


def test_auto_threshold_is_merged_across_ranks_by_max() -> None:
    policy = StallPolicy(floor_s=1, p99_factor=10, warmup_steps=5)
    cfg = RuleConfig(stall=policy, heartbeat_timeout_s=1e6)
    reg = Registry()
    stepping(reg, 0, 50, 0.1)  # both ranks end their last step at T0 + 5
    t = stepping(reg, 1, 10, 0.5)
    # rank 0 alone would get 1 s; the job's slowest rank sets 5 s for both.
    assert evaluate(reg, cfg, t + 4.0) == []
    assert fired(evaluate(reg, cfg, t + 5.5)) == {(0, "stall"), (1, "stall")}


def test_declared_phase_covers_a_stall_and_overrun_is_hung() -> None:
    cfg = RuleConfig(stall=StallPolicy(timeout_s=5), heartbeat_timeout_s=1e6)
    reg = Registry()
    t = stepping(reg, 0, 3, 1.0)
    w = next(iter(reg))
    reg.apply(
        w, report(t + 1, step=3, step_t_s=t, phases=(phase("checkpoint", t + 0.5, 60),)), t + 1
    )
    assert evaluate(reg, cfg, t + 59) == []  # 58 s without a step, inside the phase
    found = evaluate(reg, cfg, t + 61)
    assert fired(found) == {(0, "phase_overrun")}
    assert found[0].evidence["phase"] == "checkpoint"
    assert found[0].evidence["timeout_s"] == 60


def test_phase_without_timeout_uses_the_default() -> None:
    cfg = RuleConfig(stall=StallPolicy(timeout_s=5), heartbeat_timeout_s=1e6, phase_timeout_s=100)
    reg = Registry()
    w = connected(reg, 0, T0)
    reg.apply(w, report(T0 + 1, step=1, phases=(phase("eval", T0 + 1),)), T0 + 1)
    assert evaluate(reg, cfg, T0 + 100) == []
    assert fired(evaluate(reg, cfg, T0 + 101.5)) == {(0, "phase_overrun")}


def test_phase_on_one_rank_covers_peers_waiting_for_it() -> None:
    """Rank 0 checkpoints for minutes; ranks 1..3 sit in their next allreduce."""
    cfg = RuleConfig(stall=StallPolicy(timeout_s=5), heartbeat_timeout_s=1e6)
    reg = Registry()
    for r in range(4):
        stepping(reg, r, 3, 1.0)
    t = T0 + 3
    ckpt = phase("checkpoint", t, 900)
    for w in reg:
        phases = (ckpt,) if w.hello.rank == 0 else ()
        reg.apply(w, report(t + 1, step=3, step_t_s=t, phases=phases), t + 1)
    assert evaluate(reg, cfg, t + 300) == []
    # The phase ends at t+300: every rank's stall clock restarts there.
    done = phase("checkpoint", t, 900, end_s=t + 300)
    for w in reg:
        reg.apply(
            w,
            report(t + 301, step=3, step_t_s=t, finished=(done,) if w.hello.rank == 0 else ()),
            t + 301,
        )
    assert evaluate(reg, cfg, t + 304) == []
    assert fired(evaluate(reg, cfg, t + 305.5)) == {(r, "stall") for r in range(4)}


def test_startup_timeout_applies_before_the_first_step() -> None:
    cfg = RuleConfig(stall=StallPolicy(timeout_s=5, startup_timeout_s=600), heartbeat_timeout_s=1e6)
    reg = Registry()
    w = connected(reg, 0, T0)
    reg.apply(w, report(T0 + 1), T0 + 1)
    assert evaluate(reg, cfg, T0 + 599) == []  # not judged by the 5 s stall limit
    found = evaluate(reg, cfg, T0 + 600.5)
    assert fired(found) == {(0, "startup")}
    assert found[0].verdict is Verdict.HUNG


def test_exit_without_goodbye_is_dead_and_goodbye_is_silent() -> None:
    cfg = RuleConfig(heartbeat_timeout_s=10)
    reg = Registry()
    a, b = connected(reg, 0, T0), connected(reg, 1, T0)
    for w in (a, b):
        reg.apply(w, report(T0, step=1), T0)
    reg.close(a, a.generation, "vanished", T0 + 1, pid_alive=False)
    reg.close(b, b.generation, "goodbye", T0 + 1, pid_alive=False)
    found = evaluate(reg, cfg, T0 + 1.1)
    assert fired(found) == {(0, "exit")}
    assert found[0].verdict is Verdict.DEAD
    assert found[0].evidence["pid_alive"] is False
    assert fired(evaluate(reg, cfg, T0 + 60)) == {(0, "exit")}  # a dead pid is not "unresponsive"


def test_vanished_stream_with_live_pid_becomes_unresponsive() -> None:
    cfg = RuleConfig(heartbeat_timeout_s=10)
    reg = Registry()
    w = connected(reg, 0, T0)
    reg.apply(w, report(T0, step=1), T0)
    reg.close(w, w.generation, "vanished", T0 + 1, pid_alive=True)
    assert fired(evaluate(reg, cfg, T0 + 2)) == {(0, "exit")}
    assert fired(evaluate(reg, cfg, T0 + 10.5)) == {(0, "exit"), (0, "heartbeat")}


def test_killed_workers_are_not_judged_again() -> None:
    reg = Registry()
    w = connected(reg, 0, T0)
    w.killed_by_us = True
    assert evaluate(reg, RuleConfig(heartbeat_timeout_s=1), T0 + 100) == []


def test_gpu_memory_needs_consecutive_reports_over_the_ratio() -> None:
    cfg = RuleConfig(gpu_memory_ratio=0.95, gpu_memory_reports=3, heartbeat_timeout_s=1e6)
    reg = Registry()
    w = connected(reg, 0, T0)
    total = 80 * 2**30

    def send(i: int, ratio: float) -> None:
        gpu = GpuMemoryData(
            has_nvml=True, device_used_bytes=int(total * ratio), device_total_bytes=total
        )
        reg.apply(w, report(T0 + i, step=i, seq=i, gpu=gpu), T0 + i)

    send(1, 0.96)
    send(2, 0.97)
    send(3, 0.50)
    send(4, 0.96)
    send(5, 0.99)
    assert evaluate(reg, cfg, T0 + 5) == []
    send(6, 0.98)
    found = evaluate(reg, cfg, T0 + 6)
    assert fired(found) == {(0, "gpu_memory")}
    assert found[0].verdict is Verdict.DEGRADED
    assert found[0].evidence["used_ratio"] == 0.98


def test_sync_latency_is_degraded() -> None:
    cfg = RuleConfig(sync_latency_s=5, heartbeat_timeout_s=1e6)
    reg = Registry()
    w = connected(reg, 0, T0)
    reg.apply(w, report(T0 + 1, step=1, sync=SyncData(count=3, p50_s=0.1, max_s=4.9)), T0 + 1)
    assert evaluate(reg, cfg, T0 + 1) == []
    reg.apply(
        w, report(T0 + 2, step=2, seq=2, sync=SyncData(count=3, p50_s=0.1, max_s=6.0)), T0 + 2
    )
    found = evaluate(reg, cfg, T0 + 2)
    assert fired(found) == {(0, "sync_latency")}
    assert found[0].verdict is Verdict.DEGRADED


def test_sync_inflight_fires_after_the_first_step_only() -> None:
    cfg = RuleConfig(sync_timeout_s=5, heartbeat_timeout_s=1e6, stall=StallPolicy(timeout_s=1000))
    inflight = SyncData(
        groups=(GroupSeqData("default", 8, 7, int((T0 + 1) * 1e9), "allreduce", 8),)
    )
    reg = Registry()
    w = connected(reg, 0, T0)
    reg.apply(w, report(T0 + 1, sync=inflight), T0 + 1)  # before step 1: start-up
    assert evaluate(reg, cfg, T0 + 20) == []
    reg.apply(w, replace(report(T0 + 2, step=1, seq=2), sync=inflight), T0 + 2)
    assert evaluate(reg, cfg, T0 + 5.9) == []
    found = evaluate(reg, cfg, T0 + 6.2)
    assert fired(found) == {(0, "sync_inflight")}
    assert found[0].evidence["group"] == "default"
    assert found[0].evidence["inflight_age_s"] > 5


def test_worker_clock_offset_is_mapped() -> None:
    """A worker whose monotonic clock is 1e4 s ahead (another host) is judged right."""
    cfg = RuleConfig(stall=StallPolicy(timeout_s=10), heartbeat_timeout_s=1e6)
    reg = Registry()
    w = connected(reg, 0, T0)
    skew = 10_000.0
    reg.apply(w, report(T0 + skew + 1, step=1, step_t_s=T0 + skew + 1), T0 + 1.002)
    reg.apply(w, report(T0 + skew + 2, step=1, step_t_s=T0 + skew + 1, seq=2), T0 + 2.001)
    assert abs(w.last_step_at - (T0 + 1.001)) < 0.01
    assert evaluate(reg, cfg, T0 + 10.9) == []
    assert fired(evaluate(reg, cfg, T0 + 11.1)) == {(0, "stall")}
