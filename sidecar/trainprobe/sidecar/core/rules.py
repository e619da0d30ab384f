"""The rules: pure functions from worker state and the time to findings.

| rule          | verdict      | fires when                                                   |
|---------------|--------------|--------------------------------------------------------------|
| heartbeat     | UNRESPONSIVE | no report for heartbeat_timeout_s (at least 3 intervals)      |
| exit          | DEAD         | the stream ended without a Goodbye                           |
| phase_overrun | HUNG         | a declared phase ran past its timeout                        |
| init_straggler| HUNG         | still before init_process_group init_straggler_s after the   |
|               |              | last peer arrived in the rendezvous                          |
| rendezvous    | HUNG         | every rank of the job inside init_process_group, none out    |
|               |              | rendezvous_timeout_s after the last arrived                  |
| startup       | HUNG         | no first step within startup_timeout_s, outside any phase    |
| stall         | HUNG         | reports arrive but the step has not advanced for the stall   |
|               |              | threshold, outside any phase                                 |
| sync_inflight | HUNG         | the oldest in-flight collective is older than sync_timeout_s |
| sync_latency  | DEGRADED     | a window's slowest gradient sync exceeded sync_latency_s     |
| gpu_memory    | DEGRADED     | device memory used/total >= ratio in N NVML samples in a row |

The sidecar's own clock is suspect too: ages are judged as of each worker's
last send (``ingest_lag_s``), not its arrival, and after the sidecar's loop
froze a worker is judged only once a report sent after the freeze arrives
(``fresh_after``; its silence counts from the resume).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainprobe.sidecar.core.conventions import INIT_PHASE, RENDEZVOUS_PHASE, STARTUP_PHASES
from trainprobe.sidecar.core.model import (
    ActivePhase,
    Finding,
    GroupSeqData,
    Verdict,
    WorkerState,
    heard_every_ms,
)
from trainprobe.sidecar.core.thresholds import StallPolicy, StallThreshold, stall_threshold


@dataclass(frozen=True)
class RuleConfig:
    heartbeat_timeout_s: float = 10.0
    stall: StallPolicy = field(default_factory=StallPolicy)
    phase_timeout_s: float = 3600.0
    gpu_memory_ratio: float = 0.95
    gpu_memory_reports: int = 3
    sync_latency_s: float = 5.0
    sync_timeout_s: float = 3.0
    init_straggler_s: float = 5.0
    rendezvous_timeout_s: float = 120.0


@dataclass(frozen=True)
class JobContext:
    """What the rules need to know about a worker's job as a whole.

    Ranks of a job wait on each other: while rank 0 writes a checkpoint inside
    a declared phase, the others sit in their next allreduce. So a phase held
    by any rank covers every rank of the job, and the stall clock of every rank
    restarts when the job's last phase ends.
    """

    threshold: StallThreshold
    phase_holders: tuple[int, ...] = ()
    last_phase_end_at: float = 0.0
    #: Start-up: the ranks waiting inside init_process_group (phase rendezvous),
    #: when the last of them arrived, the job's world size, and how many of its
    #: ranks have a live stream here.
    arrived: tuple[int, ...] = ()
    last_arrival_at: float = 0.0
    world_size: int = 0
    connected: int = 0


def job_contexts(workers: Iterable[WorkerState], policy: StallPolicy) -> dict[str, JobContext]:
    """The context of every job present in ``workers``, in one pass over them.

    The job's threshold takes the maxima over its ranks (see thresholds.py).
    The tally is inlined (one method call per worker per tick cost more than
    the tally itself); each job's is [samples, p99_s, phase holders, last
    phase end, ranks arrived in the rendezvous, the last arrival, world size,
    connected ranks].
    Start-up phases hold nothing for the job: a rank before its process group
    is judged by :func:`_startup`, against its peers.
    """
    tallies: dict[str, list[Any]] = {}
    for w in workers:
        t = tallies.get(w.hello.job_id)
        if t is None:
            t = tallies[w.hello.job_id] = [0, None, [], 0.0, [], 0.0, 0, 0]
        window = w.step_samples
        # No window outgrows its maxlen: once a job's count reaches it, skip len().
        if t[0] < window.maxlen and (n := len(window)) > t[0]:
            t[0] = n
        p = w.step_p99_s
        if p is not None and (t[1] is None or p > t[1]):
            t[1] = p
        if w.active_phases and w.connected:
            for ph in w.active_phases:
                if ph.name == RENDEZVOUS_PHASE:
                    t[4].append(w.hello.rank)
                    t[5] = max(t[5], ph.started_at)
                elif ph.name not in STARTUP_PHASES:
                    t[2].append(w.hello.rank)
                    break
        if w.last_phase_end_at > t[3]:
            t[3] = w.last_phase_end_at
        if w.hello.world_size > t[6]:
            t[6] = w.hello.world_size
        if w.connected:  # one session per (job, rank): a count is the ranks'
            t[7] += 1
    return {
        job: JobContext(
            threshold=stall_threshold(policy, [samples], [p99_s]),
            phase_holders=tuple(sorted(set(holders))),
            last_phase_end_at=last_end,
            arrived=tuple(sorted(set(arrived))),
            last_arrival_at=last_arrival,
            world_size=world,
            connected=live,
        )
        for job, (samples, p99_s, holders, last_end, arrived, last_arrival, world, live) in (
            tallies.items()
        )
    }


def evaluate(workers: Iterable[WorkerState], cfg: RuleConfig, now: float) -> list[Finding]:
    """Every finding for every worker at time ``now``.

    The common worker (connected, stepping, no phase, nothing in flight, no
    slow sync window or GPU data, its job holding no phase, its report and step
    ages within the smallest limits that can apply) is passed over without
    :func:`evaluate_worker`, which would find nothing for it either
    (tests/unit/test_rules_fast_path.py).
    """
    workers = workers if isinstance(workers, list) else list(workers)
    contexts = job_contexts(workers, cfg.stall)
    # The heartbeat limit is never below heartbeat_timeout_s (heartbeat_limit_s).
    heartbeat_s, sync_latency_s = cfg.heartbeat_timeout_s, cfg.sync_latency_s
    # Per job: (its stall threshold, its last phase end), or None where a phase
    # rules out the fast path; one lookup per worker.
    fast: dict[str, tuple[float, float] | None] = {
        job: None if ctx.phase_holders else (ctx.threshold.seconds, ctx.last_phase_end_at)
        for job, ctx in contexts.items()
    }
    out: list[Finding] = []
    for w in workers:
        if (
            w.has_step
            and now - w.last_report_at <= heartbeat_s
            and w.connected
            and not w.active_phases
            and not w.inflight_since
            and not w.gpu_ratios
            and not w.killed_by_us
            and not w.ended
            and (job_fast := fast[w.hello.job_id]) is not None
            # Sync data that _degraded would pass over (no slow window).
            and (
                (sync := w.last_report.sync if w.last_report is not None else None) is None
                or not sync.count
                or sync.max_s <= sync_latency_s
            )
            and (lag := w.ingest_lag_s) <= heartbeat_s
            and now - lag - max(w.last_step_at, job_fast[1]) <= job_fast[0]
        ):
            continue
        found = evaluate_worker(w, cfg, contexts[w.hello.job_id], now)
        if found:
            out.extend(found)
    return out


def _finding(w: WorkerState, rule: str, verdict: Verdict, **evidence: object) -> Finding:
    return Finding(w.key, rule, verdict, evidence, w.hello.pid)


def heartbeat_limit_s(w: WorkerState, cfg: RuleConfig) -> float:
    """Silence past this is UNRESPONSIVE: the timeout, or three times as long as the
    sidecar waits between reports (the hook's interval, or its relay's batches)."""
    return max(cfg.heartbeat_timeout_s, 3 * heard_every_ms(w) / 1000.0)


def evaluate_worker(w: WorkerState, cfg: RuleConfig, job: JobContext, now: float) -> list[Finding]:
    """Findings for one worker; at most one HUNG/UNRESPONSIVE among them."""
    if w.killed_by_us or w.ended == "goodbye":
        return []
    out: list[Finding] = []
    # A stream that broke across our own freeze (the hook's write timed out)
    # while its process lives is our doing: wait for the reconnect, or the
    # heartbeat counted from the resume.
    if w.ended == "vanished" and not (w.fresh_after and w.pid_alive_at_end):
        out.append(
            _finding(
                w,
                "exit",
                Verdict.DEAD,
                pid_alive=w.pid_alive_at_end,
                last_step=w.last_step if w.has_step else None,
                report_age_s=round(now - w.last_report_at, 3),
            )
        )
        if not w.pid_alive_at_end:
            return out
    # After a freeze of the sidecar's own loop, silence counts from the resume.
    report_age = now - max(w.last_report_at, w.fresh_after)
    limit = heartbeat_limit_s(w, cfg)
    if report_age > limit:
        silent = _finding(
            w,
            "heartbeat",
            Verdict.UNRESPONSIVE,
            report_age_s=round(report_age, 3),
            timeout_s=limit,
        )
        if not w.fresh_after:
            _as_of(silent, w.ingest_lag_s)  # its last report was sent that much earlier
        out.append(silent)
        return out  # every other rule needs fresh reports
    if not w.connected or w.fresh_after:
        return out  # fresh_after: its reports predate our freeze; wait for a new one
    # Ages as of the last report's send: what reached us late (the sidecar lagged)
    # is not the worker's fault, nor is a relaying node's wait for its next batch
    # (no report can come sooner). Bounded, so no clock a client sends hides a hang.
    shift = min(max(w.ingest_lag_s, w.relay_interval_ms / 1000.0), limit)
    now -= shift
    if w.gpu_ratios or (w.last_report is not None and w.last_report.sync is not None):
        out.extend(_degraded(w, cfg))
    if w.active_phases:
        declared = [p for p in w.active_phases if p.name not in STARTUP_PHASES]
        hung = _phase_overrun(w, cfg, now, declared) if declared else _startup(w, cfg, job, now)
    elif job.phase_holders:
        hung = None  # another rank's declared phase covers this one's wait
    else:
        hung = _progress(w, cfg, job, now)
    if hung is not None:
        _as_of(hung, shift)
        out.append(hung)
    return out


def _as_of(f: Finding, lag_s: float) -> None:
    """Say that ``f``'s ages were judged as of ``lag_s`` before now (the last
    report's send, or its relay batch): the onset is then that much earlier
    than ``now - age``, and the incident's detection latency counts it."""
    if lag_s >= 0.001:
        f.evidence["as_of_lag_s"] = round(lag_s, 3)


def _phase_overrun(
    w: WorkerState, cfg: RuleConfig, now: float, phases: list[ActivePhase]
) -> Finding | None:
    for p in phases:
        timeout = p.timeout_s or cfg.phase_timeout_s
        elapsed = now - p.started_at
        if elapsed > timeout:
            return _finding(
                w,
                "phase_overrun",
                Verdict.HUNG,
                phase=p.name,
                elapsed_s=round(elapsed, 3),
                timeout_s=timeout,
                declared=bool(p.timeout_s),
            )
    return None


def _startup(w: WorkerState, cfg: RuleConfig, job: JobContext, now: float) -> Finding | None:
    """A rank before its process group, judged against its peers.

    Peers inside init_process_group have done all their own start-up and wait
    for the ranks that are not there yet: a rank still outside it
    ``init_straggler_s`` after the last of them arrived holds the job up (a
    verdict; the kill waits for the patience, as a slow data read may end).
    Only once every rank of the world has a live stream here: a rank that has
    not connected may be the one they wait for, or arrive later still, so no
    "last arrival" is known. When every rank of the job is inside and none
    comes out, the rendezvous itself is stuck (the store, or the backend's
    connection set-up). Without arrived peers, or with ranks of the world
    missing, the start-up rule applies.
    """
    names = {p.name for p in w.active_phases}
    if RENDEZVOUS_PHASE in names:
        world = job.world_size
        if world > 1 and len(job.arrived) >= world:
            stuck = now - job.last_arrival_at
            if stuck > cfg.rendezvous_timeout_s:
                return _finding(
                    w,
                    "rendezvous",
                    Verdict.HUNG,
                    phase=RENDEZVOUS_PHASE,
                    arrived=list(job.arrived),
                    stuck_s=round(stuck, 3),
                    timeout_s=cfg.rendezvous_timeout_s,
                )
        return None  # waiting for a peer: the rank not there is the one to name
    if INIT_PHASE in names and job.arrived and job.connected >= job.world_size:
        waited = now - job.last_arrival_at
        if waited > cfg.init_straggler_s:
            return _finding(
                w,
                "init_straggler",
                Verdict.HUNG,
                phase=INIT_PHASE,
                waiting=list(job.arrived),
                waited_s=round(waited, 3),
                timeout_s=cfg.init_straggler_s,
            )
        return None
    return _progress(w, cfg, job, now)


def _progress(w: WorkerState, cfg: RuleConfig, job: JobContext, now: float) -> Finding | None:
    if not w.has_step:
        elapsed = now - max(w.first_seen_at, job.last_phase_end_at)
        if elapsed > cfg.stall.startup_timeout_s:
            return _finding(
                w,
                "startup",
                Verdict.HUNG,
                elapsed_s=round(elapsed, 3),
                timeout_s=cfg.stall.startup_timeout_s,
            )
        return None
    # Collectives before the first step (rendezvous, data download barriers) are
    # start-up, judged by the start-up timeout above.
    inflight = w.oldest_inflight()
    if inflight is not None:
        group, since = inflight
        age = now - max(since, job.last_phase_end_at)
        if age > cfg.sync_timeout_s:
            seq = _inflight_seq(w, group)
            return _finding(
                w,
                "sync_inflight",
                Verdict.HUNG,
                group=group,
                inflight_age_s=round(age, 3),
                timeout_s=cfg.sync_timeout_s,
                step=w.last_step,
                op=seq.inflight_op if seq else None,
                seq=seq.inflight_seq if seq else None,
                completed=seq.completed if seq else None,
            )
    threshold = job.threshold
    step_age = now - max(w.last_step_at, job.last_phase_end_at)
    if step_age > threshold.seconds:
        return _finding(
            w,
            "stall",
            Verdict.HUNG,
            step=w.last_step,
            step_age_s=round(step_age, 3),
            threshold_s=round(threshold.seconds, 3),
            basis=threshold.basis,
            p99_step_s=None if threshold.p99_s is None else round(threshold.p99_s, 6),
            samples=threshold.samples,
        )
    return None


def _inflight_seq(w: WorkerState, group: str) -> GroupSeqData | None:
    sync = w.last_report.sync if w.last_report else None
    return next((g for g in sync.groups if g.group == group), None) if sync else None


def _degraded(w: WorkerState, cfg: RuleConfig) -> list[Finding]:
    out: list[Finding] = []
    n = cfg.gpu_memory_reports
    # Tested before copying the samples: most workers have none (no GPU) or too few.
    if len(w.gpu_ratios) >= n and all(r >= cfg.gpu_memory_ratio for r in list(w.gpu_ratios)[-n:]):
        gpu = w.gpu
        out.append(
            _finding(
                w,
                "gpu_memory",
                Verdict.DEGRADED,
                used_ratio=round(w.gpu_ratios[-1], 4),
                ratio=cfg.gpu_memory_ratio,
                reports=n,
                used_bytes=gpu.device_used_bytes if gpu else None,
                total_bytes=gpu.device_total_bytes if gpu else None,
                reserved_bytes=gpu.reserved_bytes if gpu else None,
                gpu_uuid=w.gpu_uuid or None,
            )
        )
    # The latest window only: once a window passes without a slow sync the
    # episode ends, and the next slow one is a new incident.
    sync = w.last_report.sync if w.last_report else None
    if sync is not None and sync.count and sync.max_s > cfg.sync_latency_s:
        slowest = max(sync.samples, key=lambda c: c.end_mono_ns - c.start_mono_ns, default=None)
        out.append(
            _finding(
                w,
                "sync_latency",
                Verdict.DEGRADED,
                max_sync_s=round(sync.max_s, 6),
                p50_sync_s=round(sync.p50_s, 6),
                threshold_s=cfg.sync_latency_s,
                collectives=sync.count,
                group=slowest.group if slowest else None,
                op=slowest.op if slowest else None,
                seq=slowest.seq if slowest else None,
            )
        )
    return out
