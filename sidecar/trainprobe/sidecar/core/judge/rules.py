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
| startup_      | HUNG         | no first step and in no collective init_straggler_s after    |
| straggler     |              | the last peer began waiting in its first one (a first        |
|               |              | allreduce, a barrier); every rank of the world connected     |
| startup       | HUNG         | no first step within startup_timeout_s, outside any phase    |
|               |              | (not for a start-up hook past its process group)             |
| stall         | HUNG         | reports arrive but the step has not advanced for the stall   |
|               |              | threshold, outside any phase                                 |
| sync_inflight | HUNG         | the oldest in-flight collective is older than sync_timeout_s |
| sync_latency  | DEGRADED     | a window's slowest gradient sync exceeded sync_latency_s     |
| gpu_memory    | DEGRADED     | device memory used/total >= ratio in N NVML samples in a row |

The sidecar's own clock is suspect too: ages are judged as of each worker's
last send (``ingest_lag_s``), not its arrival, and after the sidecar's loop
froze a worker is judged only once a report sent after the freeze arrives
(``fresh_after``; its silence counts from the resume). While the sidecar is
behind its reports, every age is judged ``allowance_s`` (its own lateness,
core/session/pace.py) earlier, so what it has not read yet ages nobody.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from trainprobe.sidecar.core.conventions import RENDEZVOUS_PHASE, STARTUP_PHASES
from trainprobe.sidecar.core.judge.rule_context import JobContext, RuleConfig
from trainprobe.sidecar.core.judge.worker_rules import (
    degraded,
    finding,
    phase_overrun,
    progress,
    startup,
)
from trainprobe.sidecar.core.session.model import (
    Finding,
    Verdict,
    WorkerState,
    heard_every_ms,
)
from trainprobe.sidecar.core.session.thresholds import StallPolicy, stall_threshold

__all__ = [
    "JobContext",
    "RuleConfig",
    "evaluate",
    "evaluate_worker",
    "heartbeat_limit_s",
    "job_contexts",
]


def job_contexts(workers: Iterable[WorkerState], policy: StallPolicy) -> dict[str, JobContext]:
    """The context of every job present in ``workers``, in one pass over them.

    The job's threshold takes the maxima over its ranks (see thresholds.py).
    The tally is inlined (one method call per worker per tick cost more than
    the tally itself); each job's is [samples, p99_s, phase holders, last
    phase end, ranks arrived in the rendezvous, the last arrival, world size,
    connected ranks, the arrivals, last arrival and connected ranks of
    verified sessions alone, and the ranks waiting in a collective before
    their first step and when the last began, of all sessions and of the
    verified ones].
    Start-up phases hold nothing for the job: a rank before its process group
    is judged by :func:`worker_rules.startup`, against its peers (a verified
    rank against its verified peers: ``JobContext.for_rank``).
    """
    tallies: dict[str, list[Any]] = {}
    for w in workers:
        t = tallies.get(w.hello.job_id)
        if t is None:
            t = tallies[w.hello.job_id] = [
                0,
                None,
                [],
                0.0,
                [],
                0.0,
                0,
                0,
                [],
                0.0,
                0,
                [],
                0.0,
                [],
                0.0,
            ]
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
                    if w.verified:
                        t[8].append(w.hello.rank)
                        t[9] = max(t[9], ph.started_at)
                elif ph.name not in STARTUP_PHASES:
                    t[2].append(w.hello.rank)
                    break
        if w.last_phase_end_at > t[3]:
            t[3] = w.last_phase_end_at
        if w.hello.world_size > t[6]:
            t[6] = w.hello.world_size
        if w.connected:  # one session per (job, rank): a count is the ranks'
            t[7] += 1
            if w.verified:
                t[10] += 1
            if w.inflight_since and not w.has_step:
                since = min(w.inflight_since.values())
                t[11].append(w.hello.rank)
                t[12] = max(t[12], since)
                if w.verified:
                    t[13].append(w.hello.rank)
                    t[14] = max(t[14], since)
    out = {}
    for job, t in tallies.items():
        samples, p99_s, holders, last_end, arrived, last_arrival, world, live = t[:8]
        ctx = JobContext(
            threshold=stall_threshold(policy, [samples], [p99_s]),
            phase_holders=tuple(sorted(set(holders))),
            last_phase_end_at=last_end,
            arrived=tuple(sorted(set(arrived))),
            last_arrival_at=last_arrival,
            world_size=world,
            connected=live,
            first_waiting=tuple(sorted(t[11])),
            first_wait_at=t[12],
        )
        if t[10] != live or len(t[8]) != len(arrived) or len(t[13]) != len(t[11]):
            # An unverified session in the job: a verified rank is judged without it.
            ctx = replace(
                ctx,
                verified=replace(
                    ctx,
                    arrived=tuple(sorted(set(t[8]))),
                    last_arrival_at=t[9],
                    connected=t[10],
                    first_waiting=tuple(sorted(t[13])),
                    first_wait_at=t[14],
                ),
            )
        out[job] = ctx
    return out


def evaluate(
    workers: Iterable[WorkerState], cfg: RuleConfig, now: float, allowance_s: float = 0.0
) -> list[Finding]:
    """Every finding for every worker at time ``now``, ages judged ``allowance_s``
    earlier (the sidecar's own lateness: :func:`evaluate_worker`).

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
    heard_by = now - allowance_s
    for w in workers:
        if (
            w.has_step
            and heard_by - w.last_report_at <= heartbeat_s
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
            and now - max(lag, allowance_s) - max(w.last_step_at, job_fast[1]) <= job_fast[0]
        ):
            continue
        found = evaluate_worker(w, cfg, contexts[w.hello.job_id], now, allowance_s)
        if found:
            out.extend(found)
    return out


def heartbeat_limit_s(w: WorkerState, cfg: RuleConfig) -> float:
    """Silence past this is UNRESPONSIVE: the timeout, or three times as long as the
    sidecar waits between reports (the hook's interval, or its relay's batches)."""
    return max(cfg.heartbeat_timeout_s, 3 * heard_every_ms(w) / 1000.0)


def evaluate_worker(
    w: WorkerState, cfg: RuleConfig, job: JobContext, now: float, allowance_s: float = 0.0
) -> list[Finding]:
    """Findings for one worker; at most one HUNG/UNRESPONSIVE among them.

    ``allowance_s``: how late the sidecar itself is (core/session/pace.py). Silence is
    judged that much earlier, and every other age as of the worker's last send
    or that much earlier, whichever is earlier. The shift to the worker's send
    is bounded by the heartbeat limit plus that lateness: streams are not all
    read alike (under load some lag the others by seconds), and no client's
    clock hides its hang longer than the limit and what the sidecar measured
    of its own lateness, which is no client's word."""
    if w.killed_by_us or w.ended == "goodbye":
        return []
    out: list[Finding] = []
    # A stream that broke across our own freeze (the hook's write timed out)
    # while its process lives is our doing: wait for the reconnect, or the
    # heartbeat counted from the resume.
    if w.ended == "vanished" and not (w.fresh_after and w.pid_alive_at_end):
        out.append(
            finding(
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
    report_age = now - allowance_s - max(w.last_report_at, w.fresh_after)
    limit = heartbeat_limit_s(w, cfg)
    if report_age > limit:
        silent = finding(
            w,
            "heartbeat",
            Verdict.UNRESPONSIVE,
            report_age_s=round(report_age, 3),
            timeout_s=limit,
        )
        # Its last report was sent that much earlier than it came.
        _as_of(silent, allowance_s + (0.0 if w.fresh_after else w.ingest_lag_s))
        out.append(silent)
        return out  # every other rule needs fresh reports
    if not w.connected or w.fresh_after:
        return out  # fresh_after: its reports predate our freeze; wait for a new one
    # Ages as of the last report's send: what reached us late (the sidecar lagged)
    # is not the worker's fault, nor is a relaying node's wait for its next batch
    # (no report can come sooner). Bounded, so no clock a client sends hides a hang.
    lag = max(w.ingest_lag_s, w.relay_interval_ms / 1000.0)
    shift = max(allowance_s, min(lag, limit + allowance_s))
    now -= shift
    if w.gpu_ratios or (w.last_report is not None and w.last_report.sync is not None):
        out.extend(degraded(w, cfg))
    if w.active_phases:
        declared = [p for p in w.active_phases if p.name not in STARTUP_PHASES]
        hung = (
            phase_overrun(w, cfg, now, declared)
            if declared
            else startup(w, cfg, job.for_rank(w.verified), now)
        )
    elif job.phase_holders:
        hung = None  # another rank's declared phase covers this one's wait
    else:
        hung = progress(w, cfg, job.for_rank(w.verified), now)
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
