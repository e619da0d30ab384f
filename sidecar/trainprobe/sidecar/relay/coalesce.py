"""Folding one worker's consecutive reports into one, on the relaying node.

Why: the upstream's cost is per report it applies (conversion, validation,
registry, rules' inputs, telemetry), and at job scale it is the one process
that sees every rank. A hook reports every ``interval_ms`` (100 ms by
default) and its node sends upstream every ``relay_interval_ms`` (200 ms), so
a batch carries about two reports per worker, which reach the upstream at
the same moment anyway. Folding them into one report that carries what both
carry halves the upstream's work per hook report and delays no verdict.

Lossless for everything the upstream judges on: every step time, phase end,
collective issue time and collective sample is kept, in order; scalars are
the newer report's, as the upstream would have been left with after applying
both. The one figure that cannot be folded exactly is the sync window's
median: the folded window's ``p50_s`` is the larger of the two (it is shown,
never judged on). Reports are left unfolded, and sent as they are, whenever
folding would not be equivalent: a sum past a limit the upstream enforces
(:mod:`~trainprobe.sidecar.core.limits`), two NVML samples (the GPU-memory
rule counts samples), a newer report without the older's sync state or
groups, or either report internally inconsistent (its own error must reach
the upstream as it was sent).
"""

from __future__ import annotations

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.limits import (
    MAX_DURATION_S,
    MAX_PHASES,
    MAX_RECENT,
    MAX_SAMPLES,
    MAX_STARTS,
)


def fold_into(acc: probe_pb2.Report, new: probe_pb2.Report) -> bool:
    """Make ``acc`` (the older report) carry ``new`` too; False, and ``acc``
    unchanged, when they cannot be one report."""
    if not _foldable(acc, new):
        return False
    if new.has_step and (not acc.has_step or new.total_steps >= acc.total_steps):
        # The registry keeps the step of the report with the most total steps.
        acc.has_step, acc.last_step = True, new.last_step
        acc.last_step_mono_ns = new.last_step_mono_ns
    acc.total_steps = max(acc.total_steps, new.total_steps)
    acc.seq, acc.mono_ns, acc.wall_ns = new.seq, new.mono_ns, new.wall_ns
    acc.dropped_reports = max(acc.dropped_reports, new.dropped_reports)  # a running total
    stats, more = acc.step_stats, new.step_stats
    stats.count += more.count
    stats.sum_s += more.sum_s
    stats.max_s = max(stats.max_s, more.max_s)
    del acc.active_phases[:]
    acc.active_phases.extend(new.active_phases)
    acc.finished_phases.extend(new.finished_phases)
    acc.recent_steps.extend(new.recent_steps)
    acc.recent_step_end_mono_ns.extend(new.recent_step_end_mono_ns)
    acc.recent_step_s.extend(new.recent_step_s)
    if new.HasField("gpu_memory"):
        _fold_gpu(acc, new.gpu_memory)
    if new.HasField("sync"):
        if acc.HasField("sync"):
            _fold_sync(acc.sync, new.sync)
        else:
            acc.sync.CopyFrom(new.sync)
    return True


def _foldable(acc: probe_pb2.Report, new: probe_pb2.Report) -> bool:
    if not (_consistent(acc) and _consistent(new)):
        return False
    if len(acc.recent_steps) + len(new.recent_steps) > MAX_RECENT:
        return False
    if len(acc.finished_phases) + len(new.finished_phases) > MAX_PHASES:
        return False
    if acc.step_stats.sum_s + new.step_stats.sum_s > MAX_DURATION_S:
        return False
    if new.gpu_memory.has_nvml and acc.gpu_memory.has_nvml:
        return False
    if not acc.HasField("sync"):
        return True
    if not new.HasField("sync"):
        return False  # the upstream would clear the older's in-flight state
    a, b = acc.sync, new.sync
    if len(a.samples) + len(b.samples) > MAX_SAMPLES or a.sum_s + b.sum_s > MAX_DURATION_S:
        return False
    newer = {g.group: g for g in b.groups}
    for g in a.groups:
        n = newer.get(g.group)
        if n is None or len(g.started_seqs) + len(n.started_seqs) > MAX_STARTS:
            return False
        if g.started_seqs and max(g.started_seqs) > n.issued:
            return False  # valid alone, invalid folded: send both as they are
    return True


def _consistent(r: probe_pb2.Report) -> bool:
    """The equal-length pairs that a fold could make equal by accident."""
    n = len(r.recent_steps)
    if len(r.recent_step_end_mono_ns) != n or len(r.recent_step_s) != n:
        return False
    if not r.HasField("sync"):
        return True
    names = set()
    for g in r.sync.groups:
        if len(g.started_seqs) != len(g.started_mono_ns) or g.group in names:
            return False
        names.add(g.group)
    return True


def _fold_gpu(acc: probe_pb2.Report, new: probe_pb2.GpuMemory) -> None:
    """The newer allocator figures; the one NVML sample, whichever carried it."""
    old = acc.gpu_memory
    if new.has_nvml or not old.has_nvml:
        old.CopyFrom(new)
        return
    kept = (old.device_used_bytes, old.device_total_bytes, old.process_used_bytes)
    uuid = new.device_uuid or old.device_uuid
    old.CopyFrom(new)
    old.has_nvml = True
    old.device_used_bytes, old.device_total_bytes, old.process_used_bytes = kept
    old.device_uuid = uuid


def _fold_sync(acc: probe_pb2.SyncStats, new: probe_pb2.SyncStats) -> None:
    if new.count:
        acc.p50_s = max(acc.p50_s, new.p50_s) if acc.count else new.p50_s
    acc.count += new.count
    acc.bytes += new.bytes
    acc.sum_s += new.sum_s
    acc.max_s = max(acc.max_s, new.max_s)
    older = {g.group: (list(g.started_seqs), list(g.started_mono_ns)) for g in acc.groups}
    del acc.groups[:]
    for g in new.groups:
        folded = acc.groups.add()
        folded.CopyFrom(g)
        seqs, starts = older.get(g.group, ((), ()))
        if seqs:
            folded.started_seqs[:] = [*seqs, *g.started_seqs]
            folded.started_mono_ns[:] = [*starts, *g.started_mono_ns]
    acc.samples.extend(new.samples)
