"""The rules of one worker past silence and exit, as ``rules.evaluate_worker``
calls them: a declared phase's overrun; start-up (``rendezvous``,
``init_straggler``, ``startup_straggler``, ``startup``); progress (``sync_inflight``, ``stall``);
and what degrades a worker (``gpu_memory``, ``sync_latency``). The table of
every rule is in ``core/judge/rules.py``. Pure: state and the time in, findings out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainprobe.sidecar.core.conventions import INIT_PHASE, RENDEZVOUS_PHASE
from trainprobe.sidecar.core.session.model import (
    ActivePhase,
    CollectiveData,
    Finding,
    GroupSeqData,
    SyncData,
    Verdict,
    WorkerState,
    sample_duration_ns,
)

if TYPE_CHECKING:
    from trainprobe.sidecar.core.judge.rule_context import JobContext, RuleConfig

__all__ = ["degraded", "finding", "phase_overrun", "progress", "startup"]


def finding(w: WorkerState, rule: str, verdict: Verdict, **evidence: object) -> Finding:
    return Finding(w.key, rule, verdict, evidence, w.hello.pid)


def phase_overrun(
    w: WorkerState, cfg: RuleConfig, now: float, phases: list[ActivePhase]
) -> Finding | None:
    for p in phases:
        timeout = p.timeout_s or cfg.phase_timeout_s
        elapsed = now - p.started_at
        if elapsed > timeout:
            return finding(
                w,
                "phase_overrun",
                Verdict.HUNG,
                phase=p.name,
                elapsed_s=round(elapsed, 3),
                timeout_s=timeout,
                declared=bool(p.timeout_s),
            )
    return None


def startup(w: WorkerState, cfg: RuleConfig, job: JobContext, now: float) -> Finding | None:
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
                return finding(
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
            return finding(
                w,
                "init_straggler",
                Verdict.HUNG,
                phase=INIT_PHASE,
                waiting=list(job.arrived),
                waited_s=round(waited, 3),
                timeout_s=cfg.init_straggler_s,
            )
        return None
    return progress(w, cfg, job, now)


def progress(w: WorkerState, cfg: RuleConfig, job: JobContext, now: float) -> Finding | None:
    if not w.has_step:
        elapsed = now - max(w.first_seen_at, job.last_phase_end_at)
        straggler = _first_step_straggler(w, cfg, job, now, elapsed)
        if straggler is not None:
            return straggler
        # A start-up hook kept past the process group (Hello.startup_watch) may
        # belong to a script that never uses the callback, so never steps: no
        # timeout without evidence judges it; its peers' waiting still does.
        spared = w.hello.startup_watch and not w.active_phases
        if elapsed > cfg.stall.startup_timeout_s and not spared:
            return finding(
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
            return finding(
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
        return finding(
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


def _first_step_straggler(
    w: WorkerState, cfg: RuleConfig, job: JobContext, now: float, elapsed: float
) -> Finding | None:
    """After the process group, before the first step: peers wait in their first
    collective, this rank is in none (``startup_straggler``).

    As ``init_straggler`` before it, a verdict ``init_straggler_s`` after the
    last of them began waiting, once every rank of the world has a live stream
    here (one not connected may be the one they wait for). Under Ray Train the
    group is made before any hook exists, so this is the only start-up verdict
    that names a culprit in seconds. A healthy start looks the same (rank 0
    loads or downloads while the others wait), so its kill keeps the start-up
    patience, at least ``startup_timeout_s`` (core/hang/rounds.py), counted from
    when the last of its peers began waiting (``waited_s``, the onset): from its
    connect, a set-up longer than the patience would leave none for the wait.
    """
    if not job.first_waiting or w.inflight_since or job.connected < job.world_size:
        return None
    waited = now - max(job.first_wait_at, job.last_phase_end_at)
    if waited <= cfg.init_straggler_s:
        return None
    return finding(
        w,
        "startup_straggler",
        Verdict.HUNG,
        connected_s=round(elapsed, 3),
        waiting=list(job.first_waiting),
        waited_s=round(waited, 3),
        timeout_s=cfg.init_straggler_s,
    )


def _inflight_seq(w: WorkerState, group: str) -> GroupSeqData | None:
    sync = w.last_report.sync if w.last_report else None
    return next((g for g in sync.groups if g.group == group), None) if sync else None


def degraded(w: WorkerState, cfg: RuleConfig) -> list[Finding]:
    out: list[Finding] = []
    n = cfg.gpu_memory_reports
    # Tested before copying the samples: most workers have none (no GPU) or too few.
    if len(w.gpu_ratios) >= n and all(r >= cfg.gpu_memory_ratio for r in list(w.gpu_ratios)[-n:]):
        gpu = w.gpu
        out.append(
            finding(
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
        slowest = max(sync.samples, key=sample_duration_ns, default=None)
        if _waited_for_peer(w, sync, slowest, cfg.sync_latency_s):
            return out
        out.append(
            finding(
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


def _waited_for_peer(
    w: WorkerState, sync: SyncData, slowest: CollectiveData | None, limit_s: float
) -> bool:
    """Whether the window's slow sync was this rank waiting for a late peer.

    A rank that enters a collective first waits there until the last one
    comes: its sync is long, the late rank's is the shortest of all. That
    wait is the late rank's doing (a stall, which the progress rules judge),
    so it is no finding against the waiter. Only when what is left once the
    wait is taken off still exceeds the limit is its sync slow of itself.

    Two witnesses of the wait: the sidecar judged the rank waiting in that
    very collective (``sync_inflight``, ``WorkerState.waited_sync``), or saw
    it there before the rank's first step (the start-up's wait), which
    holds whatever the collectives' numbering (torchft's replicas number
    theirs apart); or the arrival tracker said how long it waited
    (``LagStats.waited``), for a collective of this window: the slowest
    sampled one or, when the hook's sample missed it, one of the ``count``
    before it in the same group.
    """
    if slowest is None:
        return False
    if (slowest.group, slowest.seq) in w.waited_sync:
        return True  # the sidecar saw it wait there: sync_inflight, the hang's own incident
    waited = getattr(w.arrival, "waited", None)
    if waited is None:
        return False
    group, seq, wait_s = waited
    if group != slowest.group or not slowest.seq - sync.count < seq <= slowest.seq:
        return False
    return bool(sync.max_s - wait_s <= limit_s)
