"""Reject absurd input before it reaches any state.

Each check raises :class:`ValidationError` naming the field and the accepted
range, so a buggy or hostile client gets a clear status and nobody else's
state is touched. Reports are checked on every arrival: their checks build a
message only once a value has failed.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainprobe.sidecar.core.conventions import STACK_SIGNALS
from trainprobe.sidecar.core.limits import (
    MAX_DURATION_S,
    MAX_GROUPS,
    MAX_HELD,
    MAX_HELD_AGE_MS,
    MAX_ID_LEN,
    MAX_LABEL_KEY_LEN,
    MAX_LABEL_VALUE_LEN,
    MAX_LABELS,
    MAX_PATH_LEN,
    MAX_PHASES,
    MAX_RECENT,
    MAX_SAMPLES,
    MAX_SECRET_BYTES,
    MAX_STARTS,
    MAX_WORLD_SIZE,
)
from trainprobe.sidecar.core.session.model import (
    GpuMemoryData,
    GroupSeqData,
    HelloData,
    PhaseData,
    ReportData,
    SyncData,
)


class ValidationError(ValueError):
    """An input value outside its accepted range."""


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValidationError(message)


def _duration(name: str, value: float) -> None:
    # NaN fails both comparisons and infinity the second: no isfinite() needed.
    if not 0.0 <= value <= MAX_DURATION_S:
        raise ValidationError(
            f"{name}={value!r}: must be a finite number of seconds in 0..{MAX_DURATION_S:.0f}"
        )


def _text(name: str, value: str, required: bool = False) -> None:
    if len(value) > MAX_ID_LEN:
        raise ValidationError(f"{name} is {len(value)} characters; at most {MAX_ID_LEN}")
    if required and not value.strip():
        raise ValidationError(f"{name} must not be empty")


def validate_hello(h: HelloData, supported_versions: range) -> None:
    """Check an identity message; protocol version first."""
    _check(
        h.protocol_version in supported_versions,
        f"protocol_version={h.protocol_version} is not supported; this sidecar speaks "
        f"{supported_versions.start}..{supported_versions.stop - 1} (upgrade the sidecar)",
    )
    _text("job_id", h.job_id, required=True)
    _text("job_name", h.job_name)
    # A name is printed in tables and logs: no control character may forge a row.
    _check(h.job_name.isprintable(), f"job_name={h.job_name[:40]!r}: control characters")
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
    _check(
        len(h.session_secret) <= MAX_SECRET_BYTES,
        f"session_secret is {len(h.session_secret)} bytes; at most {MAX_SECRET_BYTES}",
    )
    _labels(h.labels)
    _ray(h)
    # The sidecar sends this signal to the worker's pid: only a real-time one
    # (Linux SIGRTMIN..SIGRTMAX), never one that stops or kills by design.
    _check(
        h.stack_signal == 0 or h.stack_signal in STACK_SIGNALS,
        f"stack_signal={h.stack_signal}: must be 0 or a real-time signal "
        f"({STACK_SIGNALS.start}..{STACK_SIGNALS.stop - 1})",
    )
    _check(
        len(h.stack_file) <= MAX_PATH_LEN,
        f"stack_file is {len(h.stack_file)} characters; at most {MAX_PATH_LEN}",
    )
    # The sidecar reads this file: only the hook's own, named after its pid.
    _check(
        not h.stack_file
        or (h.stack_file.startswith("/") and h.stack_file.endswith(f"/stacks-{h.pid}.txt")),
        f"stack_file must be an absolute path ending in /stacks-{h.pid}.txt",
    )


def _labels(labels: dict[str, str]) -> None:
    _check(len(labels) <= MAX_LABELS, f"labels has {len(labels)} entries; at most {MAX_LABELS}")
    for key, value in labels.items():
        _check(
            0 < len(key) <= MAX_LABEL_KEY_LEN,
            f"labels: a key is {len(key)} characters; must be 1..{MAX_LABEL_KEY_LEN}",
        )
        _check(
            len(value) <= MAX_LABEL_VALUE_LEN,
            f"labels[{key!r}] is {len(value)} characters; at most {MAX_LABEL_VALUE_LEN}",
        )


def _ray(h: HelloData) -> None:
    r = h.ray
    _text("ray.job_id", r.job_id)
    _text("ray.node_id", r.node_id)
    _text("ray.actor_id", r.actor_id)
    _text("ray.worker_id", r.worker_id)
    _text("ray.trial_or_run_name", r.run_name)


def _phase(where: str, p: PhaseData) -> None:
    _text(f"{where}.name", p.name, required=True)
    _duration(f"{where}.timeout_s", p.timeout_s)
    _check(p.start_mono_ns > 0, f"{where}.start_mono_ns must be > 0")
    _check(
        p.end_mono_ns == 0 or p.end_mono_ns >= p.start_mono_ns,
        f"{where}.end_mono_ns is before its start",
    )


def validate_report(r: ReportData) -> None:
    """Check a report: counts, steps and times must be sane.

    Runs for every report, so each check tests first and builds its message
    only when it fails (formatting every message cost more than the checks).
    """
    if r.mono_ns <= 0:
        raise ValidationError(f"mono_ns={r.mono_ns}: must be > 0")
    if r.last_step < 0:
        raise ValidationError(f"last_step={r.last_step}: steps must be >= 0")
    if r.total_steps < 0:
        raise ValidationError(f"total_steps={r.total_steps}: must be >= 0")
    if r.has_step and not 0 < r.last_step_mono_ns <= r.mono_ns:
        raise ValidationError("last_step_mono_ns must be > 0 and not after the report's mono_ns")
    if r.step_count < 0:
        raise ValidationError(f"step_stats.count={r.step_count}: must be >= 0")
    # Tested here, the call only to fail: two calls a report cost more than the tests.
    if not 0.0 <= r.step_sum_s <= MAX_DURATION_S:
        _duration("step_stats.sum_s", r.step_sum_s)
    if not 0.0 <= r.step_max_s <= MAX_DURATION_S:
        _duration("step_stats.max_s", r.step_max_s)
    if r.active_phases or r.finished_phases:
        _phases(r)
    n = len(r.recent_steps)
    if n > MAX_RECENT:
        raise ValidationError(f"{n} recent steps; at most {MAX_RECENT}")
    if len(r.recent_step_end_mono_ns) != n or len(r.recent_step_s) != n:
        raise ValidationError(
            "recent_steps, recent_step_end_mono_ns and recent_step_s must have equal lengths"
        )
    if n and min(r.recent_steps) < 0:
        raise ValidationError(f"recent step {min(r.recent_steps)}: steps must be >= 0")
    for d in r.recent_step_s:
        if not 0.0 <= d <= MAX_DURATION_S:
            _duration("recent_step_s", d)
    if r.gpu is not None:
        _gpu(r.gpu)
    if r.sync is not None:
        _sync(r.sync)


def _phases(r: ReportData) -> None:
    _check(len(r.active_phases) <= MAX_PHASES, f"more than {MAX_PHASES} active phases")
    _check(len(r.finished_phases) <= MAX_PHASES, f"more than {MAX_PHASES} finished phases")
    for i, p in enumerate(r.active_phases):
        _phase(f"active_phases[{i}]", p)
    for i, p in enumerate(r.finished_phases):
        _phase(f"finished_phases[{i}]", p)


def _gpu(g: GpuMemoryData) -> None:
    if g.device_index < 0:
        raise ValidationError(f"gpu_memory.device_index={g.device_index}: must be >= 0")
    _text("gpu_memory.device_uuid", g.device_uuid)
    if not g.has_nvml:
        return
    if g.device_total_bytes <= 0:
        raise ValidationError("gpu_memory.device_total_bytes must be > 0 with NVML")
    if g.device_used_bytes > g.device_total_bytes:
        raise ValidationError("gpu_memory.device_used_bytes exceeds device_total_bytes")
    if g.process_used_bytes > g.device_total_bytes:
        raise ValidationError("gpu_memory.process_used_bytes exceeds device_total_bytes")


def _started(g: GroupSeqData) -> None:
    n = len(g.started_seqs)
    if n > MAX_STARTS or len(g.started_mono_ns) != n:
        raise ValidationError(
            f"group {g.group!r}: started_seqs and started_mono_ns must have equal lengths "
            f"of at most {MAX_STARTS}"
        )
    if max(g.started_seqs) > g.issued or min(g.started_seqs) < 1:
        raise ValidationError(f"group {g.group!r}: a started seq outside 1..issued")
    if min(g.started_mono_ns) <= 0:
        raise ValidationError(f"group {g.group!r}: started_mono_ns must be > 0")


def _sync(s: SyncData) -> None:
    _duration("sync.p50_s", s.p50_s)
    _duration("sync.max_s", s.max_s)
    _duration("sync.sum_s", s.sum_s)
    if s.p50_s > s.max_s:
        raise ValidationError("sync.p50_s exceeds sync.max_s")
    if len(s.groups) > MAX_GROUPS:
        raise ValidationError(f"more than {MAX_GROUPS} process groups")
    if len(s.samples) > MAX_SAMPLES:
        raise ValidationError(f"{len(s.samples)} sync samples; at most {MAX_SAMPLES}")
    seen: set[str] = set()
    for g in s.groups:
        _text("sync.groups.group", g.group, required=True)
        _text("sync.groups.inflight_op", g.inflight_op)
        if g.group in seen:
            raise ValidationError(f"group {g.group!r} appears twice")
        seen.add(g.group)
        if g.completed > g.issued:
            raise ValidationError(f"group {g.group!r}: completed > issued")
        if g.inflight_seq > g.issued:
            raise ValidationError(f"group {g.group!r}: inflight_seq > issued")
        # Not compared with the report's mono_ns: the hook stamps the report
        # before its collectors run, so a collective may start in between.
        if g.oldest_inflight_start_mono_ns < 0:
            raise ValidationError(f"group {g.group!r}: oldest_inflight_start_mono_ns must be >= 0")
        if g.started_seqs or g.started_mono_ns:
            _started(g)
    for c in s.samples:
        _text("sync.samples.group", c.group)
        _text("sync.samples.op", c.op)
        if not 0 < c.start_mono_ns <= c.end_mono_ns:
            raise ValidationError(
                f"sync sample {c.group!r}#{c.seq}: end_mono_ns before start_mono_ns"
            )


def validate_held(held: Sequence[tuple[int, int]], kinds: int) -> None:
    """Check a relay batch's held workers: (how, age in ms) each, ``how`` one of
    ``kinds`` values (0 = runs again)."""
    _check(len(held) <= MAX_HELD, f"held has {len(held)} entries; at most {MAX_HELD}")
    for i, (how, age_ms) in enumerate(held):
        _check(0 <= how < kinds, f"held[{i}].how={how}: must be in 0..{kinds - 1}")
        _check(
            0 <= age_ms <= MAX_HELD_AGE_MS,
            f"held[{i}].age_ms={age_ms}: must be in 0..{MAX_HELD_AGE_MS}",
        )
