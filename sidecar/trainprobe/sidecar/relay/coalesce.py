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
folding would not be equivalent: either report invalid by the upstream's
own :func:`~trainprobe.sidecar.core.session.validate.validate_report` (its error must
reach the upstream as it was sent), a sum past a limit the upstream enforces
(:mod:`~trainprobe.sidecar.core.limits`), clocks or step totals going back,
two NVML samples (the GPU-memory rule counts samples), a hook without
per-step times (its window max is one sample per report), or a newer report
without the older's sync state or groups.

Known differences, none judged on: the registry's 16-entry windows of clock
offsets and step rates span 16 batches instead of 16 reports, and arrival
lag is exported once per folded report window (so fewer, larger windows).

A worker controls its reports' bytes: every fold costs time in proportion to
the newer report alone, and a folded report stops growing at
:data:`MAX_FOLDED_BYTES`, so no worker can make its node's loop slow.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.limits import (
    MAX_DURATION_S,
    MAX_PHASES,
    MAX_RECENT,
    MAX_SAMPLES,
    MAX_STARTS,
)
from trainprobe.sidecar.core.session.validate import ValidationError, validate_report
from trainprobe.sidecar.transport.pb import report_from_pb

#: A folded report takes no more once its parts reach this many bytes (about 40
#: default reports; a 10 s relay interval's 100 reports of a busy DDP worker go
#: up as a few). Bounds the time any one fold can take.
MAX_FOLDED_BYTES = 64 * 1024
_UINT64 = 1 << 64


def parse_report(data: bytes) -> probe_pb2.Report | None:
    """The report in a WorkerMessage's bytes, if it is one the upstream would
    accept; None for anything else, which then goes up as it came."""
    try:
        message = probe_pb2.WorkerMessage.FromString(data)
    except DecodeError:
        return None
    if message.WhichOneof("body") != "report":
        return None
    try:
        validate_report(report_from_pb(message.report))
    except ValidationError:
        return None
    return message.report


def fold_into(acc: probe_pb2.Report, new: probe_pb2.Report) -> bool:
    """Make ``acc`` (the older report) carry ``new`` too; False, and ``acc``
    unchanged, when they cannot be one report.

    Both must have passed :func:`parse_report` (``acc`` possibly as a fold of
    such reports): the checks here are those that relate the two.
    """
    if not _foldable(acc, new):
        return False
    if new.has_step and (not acc.has_step or new.total_steps >= acc.total_steps):
        # The registry keeps the step of the report with the most total steps.
        acc.has_step, acc.last_step = True, new.last_step
        acc.last_step_mono_ns = new.last_step_mono_ns
    acc.total_steps = new.total_steps  # not below acc's (_foldable)
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
    if new.mono_ns < acc.mono_ns or new.total_steps < acc.total_steps:
        return False  # applied apart, the registry would keep the older's figures
    a_stats, b_stats = acc.step_stats, new.step_stats
    if (a_stats.count and not acc.recent_step_s) or (b_stats.count and not new.recent_step_s):
        return False  # an old hook: each report's window max is one calibration sample
    if a_stats.count + b_stats.count >= _UINT64:
        return False
    if a_stats.sum_s + b_stats.sum_s > MAX_DURATION_S:
        return False
    if len(acc.recent_steps) + len(new.recent_steps) > MAX_RECENT:
        return False
    if len(acc.finished_phases) + len(new.finished_phases) > MAX_PHASES:
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
    if a.count + b.count >= _UINT64 or a.bytes + b.bytes >= _UINT64:
        return False
    newer = {g.group: g for g in b.groups}
    for g in a.groups:
        n = newer.get(g.group)
        if n is None or len(g.started_seqs) + len(n.started_seqs) > MAX_STARTS:
            return False
        if g.started_seqs and max(g.started_seqs) > n.issued:
            return False  # valid alone, invalid folded
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
    # In place, each group's newer state with its issue times appended: the
    # cost is the newer report's, whatever the folded one holds already.
    older = {g.group: g for g in acc.groups}
    for g in new.groups:
        kept = older.get(g.group)
        if kept is None:
            acc.groups.add().CopyFrom(g)
            continue
        kept.issued, kept.completed = g.issued, g.completed
        kept.oldest_inflight_start_mono_ns = g.oldest_inflight_start_mono_ns
        kept.inflight_op, kept.inflight_seq = g.inflight_op, g.inflight_seq
        kept.started_seqs.extend(g.started_seqs)
        kept.started_mono_ns.extend(g.started_mono_ns)
    acc.samples.extend(new.samples)
