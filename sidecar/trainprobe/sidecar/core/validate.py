"""Reject absurd input before it reaches any state.

Each check raises :class:`ValidationError` naming the field and the accepted
range, so a buggy or hostile client gets a clear status and nobody else's
state is touched.
"""

from __future__ import annotations

import math

from trainprobe.sidecar.core.model import HelloData, PhaseData, ReportData

MAX_ID_LEN = 256
MAX_PHASES = 64
MAX_RECENT = 4096
MAX_GROUPS = 256
MAX_WORLD_SIZE = 1 << 20
#: A step or collective lasting longer than a year is a unit bug, not training.
MAX_DURATION_S = 365 * 86400.0


class ValidationError(ValueError):
    """An input value outside its accepted range."""


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValidationError(message)


def _duration(name: str, value: float) -> None:
    _check(
        math.isfinite(value) and 0.0 <= value <= MAX_DURATION_S,
        f"{name}={value!r}: must be a finite number of seconds in 0..{MAX_DURATION_S:.0f}",
    )


def _text(name: str, value: str, required: bool = False) -> None:
    _check(len(value) <= MAX_ID_LEN, f"{name} is {len(value)} characters; at most {MAX_ID_LEN}")
    if required:
        _check(bool(value.strip()), f"{name} must not be empty")


def validate_hello(h: HelloData, supported_versions: range) -> None:
    """Check an identity message; protocol version first."""
    _check(
        h.protocol_version in supported_versions,
        f"protocol_version={h.protocol_version} is not supported; this sidecar speaks "
        f"{supported_versions.start}..{supported_versions.stop - 1} (upgrade the sidecar)",
    )
    _text("job_id", h.job_id, required=True)
    _text("host", h.host)
    _text("hook_version", h.hook_version)
    _text("gpu_uuid", h.gpu_uuid)
    _check(
        1 <= h.world_size <= MAX_WORLD_SIZE,
        f"world_size={h.world_size}: must be in 1..{MAX_WORLD_SIZE}",
    )
    _check(
        0 <= h.rank < h.world_size, f"rank={h.rank}: must be in 0..world_size-1={h.world_size - 1}"
    )
    _check(h.local_rank >= 0, f"local_rank={h.local_rank}: must be >= 0")
    _check(h.pid > 0, f"pid={h.pid}: must be > 0")
    _check(10 <= h.interval_ms <= 60_000, f"interval_ms={h.interval_ms}: must be in 10..60000")
    _check(len(h.labels) <= MAX_PHASES, f"{len(h.labels)} labels; at most {MAX_PHASES}")


def _phase(where: str, p: PhaseData) -> None:
    _text(f"{where}.name", p.name, required=True)
    _duration(f"{where}.timeout_s", p.timeout_s)
    _check(p.start_mono_ns > 0, f"{where}.start_mono_ns must be > 0")
    _check(
        p.end_mono_ns == 0 or p.end_mono_ns >= p.start_mono_ns,
        f"{where}.end_mono_ns is before its start",
    )


def validate_report(r: ReportData) -> None:
    """Check a report: counts, steps and times must be sane."""
    _check(r.mono_ns > 0, f"mono_ns={r.mono_ns}: must be > 0")
    _check(r.last_step >= 0, f"last_step={r.last_step}: steps must be >= 0")
    _check(r.total_steps >= 0, f"total_steps={r.total_steps}: must be >= 0")
    if r.has_step:
        _check(
            0 < r.last_step_mono_ns <= r.mono_ns,
            "last_step_mono_ns must be > 0 and not after the report's mono_ns",
        )
    _check(r.step_count >= 0, f"step_stats.count={r.step_count}: must be >= 0")
    _duration("step_stats.sum_s", r.step_sum_s)
    _duration("step_stats.max_s", r.step_max_s)
    _check(len(r.active_phases) <= MAX_PHASES, f"more than {MAX_PHASES} active phases")
    _check(len(r.finished_phases) <= MAX_PHASES, f"more than {MAX_PHASES} finished phases")
    for i, p in enumerate(r.active_phases):
        _phase(f"active_phases[{i}]", p)
    for i, p in enumerate(r.finished_phases):
        _phase(f"finished_phases[{i}]", p)
    n = len(r.recent_steps)
    _check(n <= MAX_RECENT, f"{n} recent steps; at most {MAX_RECENT}")
    _check(
        len(r.recent_step_end_mono_ns) == n and len(r.recent_step_s) == n,
        "recent_steps, recent_step_end_mono_ns and recent_step_s must have equal lengths",
    )
    for s in r.recent_steps:
        _check(s >= 0, f"recent step {s}: steps must be >= 0")
    for d in r.recent_step_s:
        _duration("recent_step_s", d)
    if r.gpu is not None:
        g = r.gpu
        _check(
            g.device_used_bytes <= g.device_total_bytes or not g.has_nvml,
            "gpu_memory.device_used_bytes exceeds device_total_bytes",
        )
    if r.sync is not None:
        s = r.sync
        _duration("sync.p50_s", s.p50_s)
        _duration("sync.max_s", s.max_s)
        _duration("sync.sum_s", s.sum_s)
        _check(len(s.groups) <= MAX_GROUPS, f"more than {MAX_GROUPS} process groups")
        for g in s.groups:
            _text("sync.groups.group", g.group)
            _check(g.completed <= g.issued, f"group {g.group!r}: completed > issued")
