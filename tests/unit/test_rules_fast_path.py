"""rules.evaluate's fast path and inlined job tally against the plain computation.

Randomized worker states, many of them near every limit, are judged twice:
by :func:`evaluate` (fast path, inlined tally) and by the straightforward
form below (each job's context from every rank's figures through
:func:`stall_threshold`, then :func:`evaluate_worker` for every worker).
"""

from __future__ import annotations

import random
from collections import deque

from tests.core_builders import hello, report
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.judge.rules import JobContext, evaluate_worker
from trainprobe.sidecar.core.session import (
    GpuMemoryData,
    GroupSeqData,
    Registry,
    StallPolicy,
    SyncData,
    WorkerState,
)
from trainprobe.sidecar.core.session.model import ActivePhase, Finding
from trainprobe.sidecar.core.session.thresholds import stall_threshold

NOW = 1000.0


def plain(workers: list[WorkerState], cfg: RuleConfig, now: float) -> list[Finding]:
    jobs: dict[str, list[WorkerState]] = {}
    for w in workers:
        jobs.setdefault(w.hello.job_id, []).append(w)
    ctx = {
        job: JobContext(
            threshold=stall_threshold(
                cfg.stall, [len(w.step_samples) for w in ws], [w.step_p99_s for w in ws]
            ),
            phase_holders=tuple(
                sorted(w.hello.rank for w in ws if w.connected and w.active_phases)
            ),
            last_phase_end_at=max(w.last_phase_end_at for w in ws),
        )
        for job, ws in jobs.items()
    }
    return [f for w in workers for f in evaluate_worker(w, cfg, ctx[w.hello.job_id], NOW)]


def random_worker(rng: random.Random, reg: Registry, job: str, rank: int) -> WorkerState:
    w = reg.open(
        hello(rank=rank, job=job, world=16, interval_ms=rng.choice([100, 1000, 5000])), 0.0
    )
    some = rng.random
    w.first_seen_at = NOW - rng.uniform(0, 1200)
    w.last_report_at = NOW - rng.choice([0.0, 1.0, 9.99, 10.0, 10.01, 14.9, 15.1, 100.0])
    steps = rng.choice([0, 5, 19, 20, 25, 200, 1200])  # 1,200: a full window
    w.step_samples.extend([rng.uniform(0.01, 5.0) for _ in range(steps)])
    w.step_p99_s = w.step_samples.p99()
    if some() < 0.8:
        w.has_step, w.last_step = True, rng.randint(1, 1000)
    w.last_step_at = NOW - rng.choice([0.0, 5.0, 29.9, 30.0, 30.1, 49.0, 51.0, 599.0, 700.0])
    if some() < 0.15:
        w.last_phase_end_at = NOW - rng.uniform(0, 100)
    if some() < 0.1:
        w.active_phases = [ActivePhase("ckpt", NOW - rng.uniform(0, 5000), rng.choice([0, 10]))]
    if some() < 0.1:
        w.inflight_since = {"g0": NOW - rng.uniform(0, 10)}
    if some() < 0.1:
        w.gpu_ratios = deque([rng.choice([0.5, 0.96])] * rng.randint(1, 4), maxlen=64)
        w.gpu = GpuMemoryData(has_nvml=True, device_used_bytes=96, device_total_bytes=100)
    if some() < 0.5:
        sync = None
        if some() < 0.3:
            groups = (GroupSeqData("g0", 5, 4),)
            sync = SyncData(count=rng.randint(0, 3), max_s=rng.uniform(0, 10), groups=groups)
        w.last_report = report(NOW, step=w.last_step or None, sync=sync)
    if some() < 0.1:
        w.connected, w.ended = False, rng.choice(["goodbye", "vanished", "rejected"])
        w.pid_alive_at_end = some() < 0.5
    w.killed_by_us = some() < 0.05
    return w


def test_fast_path_finds_what_the_plain_rules_find() -> None:
    rng = random.Random(7)
    checked = 0
    for trial in range(400):
        reg = Registry()
        workers = [
            random_worker(rng, reg, f"job{rng.randint(0, 3)}", rank)
            for rank in range(rng.randint(1, 12))
        ]
        timeout = rng.choice([None, None, 30.0])
        cfg = RuleConfig(
            heartbeat_timeout_s=rng.choice([10.0, 15.0]),
            stall=StallPolicy(timeout_s=timeout, floor_s=rng.choice([30.0, 50.0])),
        )
        assert evaluate(workers, cfg, NOW) == plain(workers, cfg, NOW), trial
        checked += len(workers)
    assert checked > 1000


def test_fast_path_still_reports_a_stall_among_healthy_ranks() -> None:
    reg = Registry()
    workers = []
    for rank in range(50):
        w = reg.open(hello(rank=rank, world=50), 0.0)
        w.last_report_at, w.has_step, w.last_step_at = NOW - 0.1, True, NOW - 1.0
        workers.append(w)
    workers[17].last_step_at = NOW - 700.0  # past the start-up (warm-up) threshold
    [found] = evaluate(workers, RuleConfig(), NOW)
    assert (found.key.rank, found.rule) == (17, "stall")
