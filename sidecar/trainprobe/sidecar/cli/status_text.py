"""The human text of ``trainprobe status`` and ``diagnose``: fits 100 columns, escaped."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.text import printable

__all__ = [
    "STATUS_WIDTH",
    "culprits_line",
    "decision_words",
    "format_diagnosis",
    "format_job_sync",
    "format_ray_watch",
    "format_status",
    "troubled_jobs",
]


def troubled_jobs(reply: probe_pb2.StatusReply, limit: int = 8) -> list[str]:
    """The jobs worth a Diagnose call: some worker not OK (at most ``limit``)."""
    jobs = sorted({w.job_id for w in reply.workers if w.verdict not in ("", "OK") or w.suspect})
    return jobs[:limit]


def _bytes(n: int) -> str:
    return f"{n / 2**30:.1f}G" if n else "-"


def _sync_text(w: probe_pb2.WorkerStatus) -> str:
    if w.inflight_age_s >= 1.0:
        # A collective stuck for seconds matters more than past latencies.
        return f"wait {w.inflight_age_s:.0f}s"
    if not w.sync_max_s:
        return "-"
    if w.sync_max_s >= 1.0:  # seconds-long syncs in seconds: the column stays narrow
        return f"{w.sync_p50_s:.1f}/{w.sync_max_s:.1f}s"
    return f"{w.sync_p50_s * 1000:.1f}/{w.sync_max_s * 1000:.1f}ms"


#: Columns ``trainprobe status`` fits in unless given ``--wide``.
STATUS_WIDTH = 100


def decision_words(w: probe_pb2.WorkerStatus) -> tuple[str, str]:
    """The rank's verdict as the sidecar's decision has it, and what to say beside
    it: KILLED or EVICTED once acted on, ``HUNG?``/``PAUSED`` with the patience
    countdown while watched, else the verdict and its stream's state (raw)."""
    if w.killed_rule and w.evicted:
        return "EVICTED", f"replica {w.replica} by {w.killed_rule} (incident {w.killed_incident})"
    if w.killed_rule:
        # What happened to it, not how its stream ended.
        return "KILLED", f"by {w.killed_rule} (incident {w.killed_incident})"
    if w.suspect:
        # "HUNG? 12 s of 90 s patience — ..." or "PAUSED 15 s — ...": its first word.
        verdict, _, state = w.suspect.partition(" ")
        return verdict, state
    return w.verdict, w.state


def _worker_fields(w: probe_pb2.WorkerStatus) -> dict[str, str]:
    """One worker's cells, each escaped (every string in a status came from a client)."""
    gpu = "-"
    if w.HasField("gpu_memory"):
        g = w.gpu_memory
        gpu = (
            f"{_bytes(g.device_used_bytes)}/{_bytes(g.device_total_bytes)}"
            if g.has_nvml
            else _bytes(g.reserved_bytes)
        )
    verdict, state = decision_words(w)
    return {
        "job": printable(w.job_id),
        "step": str(w.step) if w.has_step else "-",
        "phase": printable(w.phase or "-"),
        "gpu": gpu,
        "sync": _sync_text(w),
        "verdict": printable(verdict),
        "state": printable(state),
    }


def format_status(
    reply: probe_pb2.StatusReply,
    wide: bool = False,
    width: int = STATUS_WIDTH,
    diagnoses: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The human table of ``trainprobe status``: within ``width`` columns, by job;
    ``wide``: one row per worker with every column. ``diagnoses`` (job -> the
    Diagnose RPC's JSON) adds each troubled job's culprits and waiting ranks."""
    diagnoses = diagnoses or {}
    lines = _wide_rows(reply) if wide else _narrow_rows(reply, width, diagnoses)
    if wide:
        lines += [line for job in sorted(diagnoses) if (line := culprits_line(job, diagnoses[job]))]
    if not reply.workers and not reply.omitted:
        lines.append("(no workers have reported)")
    if reply.omitted:
        lines.append(
            f"({reply.omitted} more workers not shown: the reply is size-bounded; "
            "narrow it with --job)"
        )
    if reply.HasField("ingest") and (reply.ingest.overloaded or reply.ingest.shed):
        ing = reply.ingest
        line = (
            f"sidecar {'OVERLOADED' if ing.overloaded else 'was overloaded'}: {ing.shed} reports "
            f"shed (applied for liveness only), {ing.applied} applied in full; "
            f"{ing.shed_per_s:.0f} shed/s, ingest lag up to {ing.max_lag_s:.1f}s lately"
        )
        lines += [line] if wide else _wrap(line, width)
    if reply.HasField("ingest") and (reply.ingest.behind or reply.ingest.deferred):
        ing = reply.ingest
        line = (
            f"sidecar BEHIND its reports by {ing.own_lag_s:.1f}s: verdicts judged that much "
            f"later, {ing.deferred_now} deferred now"
            if ing.behind
            else "sidecar was behind its reports"
        ) + f"; {ing.deferred} verdicts deferred since start"
        lines += [line] if wide else _wrap(line, width)
    if reply.HasField("ray_watch"):
        ray = format_ray_watch(reply.ray_watch)
        lines += ray if wide else [wrapped for line in ray for wrapped in _wrap(line, width)]
    sync = format_job_sync(reply)
    lines += sync if wide else [wrapped for line in sync for wrapped in _wrap(line, width)]
    return "\n".join(lines)


def _wrap(line: str, width: int) -> list[str]:
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def culprits_line(job: str, diag: Mapping[str, Any], named: bool = True) -> str:
    """``job J: straggler: culprits [1], waiting [0, 2]``; '' for a healthy job."""
    kind = str(diag.get("kind") or "healthy")
    if kind == "healthy":
        return ""
    who = f"job {printable(job)}: " if named else "  "
    culprits, waiting = list(diag.get("culprits") or []), list(diag.get("waiting") or [])
    if not culprits and not waiting:
        return printable(f"{who}{kind}: no culprit named")
    return printable(f"{who}{kind}: culprits {culprits}, waiting {waiting}")


def _narrow_rows(
    reply: probe_pb2.StatusReply, width: int, diagnoses: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    # A job's id heads its rows, whole (users copy it into `diagnose --job`),
    # so a long id costs one line, not every row's width. GPU memory and sync
    # latency get a column only when some worker reports them.
    fields = [_worker_fields(w) for w in reply.workers]
    extra = [
        (key, name)
        for key, name in (("gpu", "GPU MEM"), ("sync", "SYNC"))
        if any(f[key] != "-" for f in fields)
    ]
    head = (
        f"  {'RANK':>4} {'PID':>7} {'STEP':>8} {'STEPS/S':>7} {'AGE':>5} {'PHASE':<10} "
        + "".join(f"{name:>11} " for _, name in extra)
        + f"{'VERDICT':<12} "
    )
    room = max(20, width - len(head))
    lines: list[str] = []
    job = None
    for w, f in zip(reply.workers, fields, strict=True):
        if w.job_id != job:
            job = w.job_id
            rows = [x for x in reply.workers if x.job_id == job]
            count = len(rows)
            # The name people read (a verified rank's first: a client without a
            # ticket does not rename the job), then the id `diagnose --job` takes.
            name = next(
                (x.job_name for x in sorted(rows, key=lambda x: not x.verified) if x.job_name), ""
            )
            label = f"{printable(name)} (id {f['job']})" if name and name != job else f["job"]
            # Every stream over: the job is finished, whatever its verdicts said.
            done = all(x.state != "connected" for x in reply.workers if x.job_id == job)
            lines.append(
                f"job {label}  ({count} worker{'' if count == 1 else 's'}"
                + (", finished)" if done else ")")
            )
            if diag := culprits_line(job, diagnoses.get(job) or {}, named=False):
                lines.append(diag)
            lines.append(head + "STATE")
        row = (
            f"  {w.rank:>4} {w.pid:>7} {f['step']:>8} {w.steps_per_s:>7.2f} "
            f"{w.report_age_s:>4.1f}s {_cut(f['phase'], 10):<10} "
            + "".join(f"{_cut(f[key], 11):>11} " for key, _ in extra)
            + f"{_cut(f['verdict'], 12):<12} "
        )
        state = textwrap.wrap(f["state"], room, break_on_hyphens=False) or [""]
        lines.append(row + state[0])
        lines += [" " * len(head) + more for more in state[1:]]
    return lines


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _wide_rows(reply: probe_pb2.StatusReply) -> list[str]:
    fields = [_worker_fields(w) for w in reply.workers]
    width = max([20, *(len(f["job"]) for f in fields)])
    lines = [
        f"{'JOB':<{width}} {'RANK':>4} {'PID':>7} {'STEP':>8} {'STEPS/S':>8} {'AGE':>6} "
        f"{'STALL':>7} {'PHASE':<12} {'GPU MEM':>13} {'SYNC P50/MAX':>14} {'VERDICT':<12} STATE"
    ]
    for w, f in zip(reply.workers, fields, strict=True):
        lines.append(
            f"{f['job']:<{width}} {w.rank:>4} {w.pid:>7} {f['step']:>8} {w.steps_per_s:>8.2f} "
            f"{w.report_age_s:>5.1f}s {w.stall_threshold_s:>6.0f}s {f['phase'][:12]:<12} "
            f"{f['gpu']:>13} {f['sync']:>14} {f['verdict']:<12} {f['state']}"
        )
    return lines


def format_ray_watch(rw: probe_pb2.RayWatchStatus) -> list[str]:
    """The Ray watcher's part of ``trainprobe status``: one line, then one per finding."""
    age = f"{rw.last_snapshot_age_s:.1f}s ago" if rw.last_snapshot_age_s >= 0 else "none yet"
    head = (
        f"RAY WATCHER: {rw.snapshots} snapshots (last {age}), {rw.cpu_s:.2f} CPU s, "
        f"{len(rw.findings)} finding{'' if len(rw.findings) == 1 else 's'}"
    )
    lines = ["", head]
    if rw.truncated:
        lines.append(
            f"  lists cut at their limit (edges may be missing): "
            f"{printable(', '.join(rw.truncated))}"
        )
    lines += [f"  error: {printable(e)}" for e in rw.errors]
    for f in rw.findings:
        lines.append(
            printable(
                f"  {f.rule} job {f.job_id} incident {f.incident_id} action {f.action}: {f.text}"
            )
        )
    return lines


def format_job_sync(reply: probe_pb2.StatusReply) -> list[str]:
    """Summary mode's part of ``trainprobe status``: this node's stream to its
    upstream, and the coordinators hosted here; nothing without either."""
    lines: list[str] = []
    if reply.HasField("job_sync"):
        js = reply.job_sync
        answer = f"{js.last_answer_age_s:.1f}s ago" if js.last_answer_age_s >= 0 else "none yet"
        if js.connected:
            state = f"connected for {js.state_age_s:.0f}s"
        else:
            lost = (
                f"LOST (down over {js.lost_after_s:.0f}s: the job's analysis sees this node's "
                "ranks only)"
                if js.lost
                else "down"
            )
            state = f"{lost} for {js.state_age_s:.0f}s"
        held = f"{js.jobs_detailed} jobs with the others' ranks, {js.jobs_digest} as a digest"
        lines += [
            "",
            printable(
                f"JOB SYNC to {js.upstream}: {state}; last answer {answer}; {held}; "
                f"{js.sent} sent, {js.received} received, {js.sessions} streams, "
                f"{js.skipped} rounds skipped"
            ),
        ]
        if js.last_error and not js.connected:
            lines.append(printable(f"  last error: {js.last_error}"))
    if reply.HasField("job_sync_hub"):
        hub = reply.job_sync_hub
        lines += [
            "",
            f"JOB SYNC UPSTREAM: {hub.nodes} nodes connected, {hub.jobs} jobs, {hub.ranks} ranks "
            f"held; {hub.refused} streams refused, {hub.missed_pushes} pushes missed",
        ]
    return lines


def format_diagnosis(text: str, ray: bool) -> str:
    """A diagnosis as the terminal gets it: a job's is one paragraph; the Ray
    watcher's graph (text or DOT) keeps its own lines, each escaped."""
    if not ray:
        return printable(text)
    return "\n".join(printable(line) for line in text.split("\n"))
