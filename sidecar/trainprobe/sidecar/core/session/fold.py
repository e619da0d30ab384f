"""How one report folds into its session: the registry's report path.

Split from ``core/session/registry.py``, which owns the sessions: this module writes
the fields a report moves (progress, clock offset, phases, samples, GPU, sync)
and nothing else; ``Registry.apply`` validates the report and calls
:func:`fold_report`. Pure, with ``now`` passed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from trainprobe.sidecar.core.session.arrival import ArrivalTracker, LagStats
from trainprobe.sidecar.core.session.model import (
    GPU_RATIO_WINDOW,
    OFFSET_RISE_PER_S,
    OFFSET_WINDOW,
    WAITING_RULE,
    ActivePhase,
    GpuMemoryData,
    ReportData,
    SyncData,
    WorkerState,
)

__all__ = ["fold_report", "lag_stats", "note_offset"]


def fold_report(
    state: WorkerState,
    report: ReportData,
    now: float,
    sampled: bool,
    arrivals: ArrivalTracker,
) -> None:
    """Fold a validated report into its session (see ``Registry.apply``)."""
    sent_s = report.mono_ns / 1e9
    note_offset(state, now - sent_s, now)
    sent_at = sent_s + state.offset_s
    state.last_sent_at = sent_at
    state.ingest_lag_s = now - sent_at
    if state.fresh_after and sent_at >= state.fresh_after:
        state.fresh_after = 0.0
    state.last_report_at = now
    waiting = state.verdict_rule == WAITING_RULE or not state.has_step
    if report.sync is not None and report.sync.count and waiting:
        _note_waited(state, report.sync)
    state.last_report = report
    state.reports += 1
    if report.has_step and (not state.has_step or report.total_steps >= state.total_steps):
        state.has_step = True
        state.last_step = report.last_step
        state.last_step_at = report.last_step_mono_ns / 1e9 + state.offset_s  # to_local
    if report.total_steps > state.total_steps:
        state.total_steps = report.total_steps
    state.rate_points.append((now, report.total_steps))
    for phase in report.finished_phases:
        state.last_phase_end_at = max(state.last_phase_end_at, state.to_local(phase.end_mono_ns))
    if report.active_phases or state.active_phases:
        state.active_phases = [
            ActivePhase(p.name, state.to_local(p.start_mono_ns), p.timeout_s)
            for p in report.active_phases
        ]
    if sampled:
        _samples(state, report)
    if report.sync is not None:
        if sampled and report.sync.count:
            state.sync_window = report.sync
        state.inflight_since = {
            g.group: state.to_local(g.oldest_inflight_start_mono_ns)
            for g in report.sync.groups
            if g.oldest_inflight_start_mono_ns
        }
        if sampled and report.sync.groups:
            arrivals.observe(state, report.sync, now)
    elif state.inflight_since:
        state.inflight_since = {}


def _note_waited(state: WorkerState, sync: SyncData) -> None:
    """The collectives the rank was judged waiting in, as of its previous report,
    that this report says finished (``WorkerState.waited_sync``).

    A collective in flight before the rank's first step is counted too: its
    length is the start-up's (peers still loading, or one hung there, which
    the start-up rules judge and may kill, ending it failed), never a slow
    sync of the rank's own."""
    prev = state.last_report.sync if state.last_report is not None else None
    if prev is None:
        return
    done = {g.group: g.completed for g in sync.groups}
    waited = tuple(
        (g.group, g.inflight_seq)
        for g in prev.groups
        if g.inflight_seq and done.get(g.group, 0) >= g.inflight_seq
    )
    if waited:
        state.waited_sync = waited


def _samples(state: WorkerState, report: ReportData) -> None:
    window = state.step_samples
    if report.recent_step_s:
        if window.extend_positive(report.recent_step_s):
            state.step_p99_s = window.p99()
    elif report.step_count:
        # An old hook without per-step samples: the window max stands in.
        window.append(report.step_max_s)
        state.step_p99_s = window.p99()
    if report.gpu is not None:
        _fold_gpu(state, report.gpu)


def note_offset(state: WorkerState, receipt_minus_send_s: float, now: float = 0.0) -> None:
    """Add one report's (receipt - send) to the session's clock-offset estimate."""
    # The smallest seen is the least delayed: the best estimate. Kept up to
    # date here so that mapping a timestamp (several per report) is one add,
    # and incrementally: a full min() only when the current minimum leaves
    # the window (it was 7% of the relayed upstream's core, bench_scale).
    offsets = state.offsets
    n = len(offsets)  # once: this runs for every report
    evicted = offsets._a[offsets._head] if n == OFFSET_WINDOW else None
    offsets.append(receipt_minus_send_s)
    low = state.offset_min_s
    if n == 0 or receipt_minus_send_s <= low:
        low = state.offset_min_s = receipt_minus_send_s
    elif evicted is not None and evicted <= low:
        low = state.offset_min_s = min(offsets._a)
    # Down at once; up by OFFSET_RISE_PER_S at most: no clock drifts by a
    # second in seconds, but a sidecar that stays behind its reports makes
    # every recent one late alike, and a window of them would take that
    # backlog for the worker's clock and hide it (a verdict 35.9 s after the
    # onset read as 3.06 s).
    if n == 0 or low <= state.offset_s:
        state.offset_s = low
    else:
        rise = OFFSET_RISE_PER_S * max(0.0, now - state.offset_at)
        state.offset_s = min(low, state.offset_s + rise)
    state.offset_at = now


def lag_stats(state: WorkerState) -> LagStats:
    """The session's arrival-lag statistics, made at its first comparison."""
    stats = state.arrival
    if stats is None:
        stats = state.arrival = LagStats()
    return stats  # type: ignore[no-any-return]


def _fold_gpu(state: WorkerState, gpu: GpuMemoryData) -> None:
    """Keep the newest allocator figures and the newest NVML sample.

    NVML is sampled at most once a second, so a report may carry allocator
    figures only; the gpu_memory rule counts NVML samples, not reports.
    """
    ratio = gpu.used_ratio
    if ratio is not None:
        ratios = state.gpu_ratios
        if not isinstance(ratios, deque):
            ratios = state.gpu_ratios = deque(maxlen=GPU_RATIO_WINDOW)
        ratios.append(ratio)
        state.gpu = gpu
        return
    prev = state.gpu
    if prev is not None and prev.has_nvml:
        gpu = replace(
            gpu,
            has_nvml=True,
            device_used_bytes=prev.device_used_bytes,
            device_total_bytes=prev.device_total_bytes,
            process_used_bytes=prev.process_used_bytes,
            device_uuid=gpu.device_uuid or prev.device_uuid,
        )
    state.gpu = gpu
