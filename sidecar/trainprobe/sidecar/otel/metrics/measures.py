"""Metric descriptions: instrument names and units, and the values to record.

Pure: the OpenTelemetry adapter creates one instrument per
:class:`InstrumentSpec` and feeds it what the functions here compute.
Histograms are folded as reports arrive (:mod:`.histograms`, keyed by their
``attributes`` in order) and counters recorded as incidents arrive;
gauges are read from a :class:`GaugeSnapshot` of the registry when a reader
(the OTLP export timer or a Prometheus scrape) collects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.session.model import HelloData, ReportData, WorkerState
from trainprobe.sidecar.core.session.overload import IngestLoad
from trainprobe.sidecar.otel.traces.spans import AttrValue

#: Bucket bounds in seconds: 1 ms .. 100 s for steps, 100 µs .. 60 s for syncs.
STEP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 100)
SYNC_BUCKETS_S: tuple[float, ...] = (
    *(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
    *(0.5, 1, 2.5, 5, 10, 30, 60),
)


@dataclass(frozen=True)
class InstrumentSpec:
    name: str
    #: "histogram", "counter", "gauge" (observable) or "updown" (observable).
    kind: str
    unit: str
    description: str
    buckets: tuple[float, ...] = ()
    #: Histograms: the attribute names, in the order of the folded keys.
    attributes: tuple[str, ...] = ()


JOB, RANK = "trainprobe.job_id", "trainprobe.rank"
GROUP, OP, MISSED = (
    "trainprobe.collective.group",
    "trainprobe.collective.op",
    "trainprobe.collective.missed",
)
STEP_DURATION = InstrumentSpec(
    "trainprobe.step.duration",
    "histogram",
    "s",
    "Training step time",
    STEP_BUCKETS_S,
    (JOB, RANK),
)
SYNC_DURATION = InstrumentSpec(
    "trainprobe.sync.duration",
    "histogram",
    "s",
    "Gradient-sync bucket and collective latency (the hook's sampled collectives)",
    SYNC_BUCKETS_S,
    (JOB, RANK, GROUP, OP),
)
ARRIVAL_LAG = InstrumentSpec(
    "trainprobe.collective.arrival_lag",
    "histogram",
    "s",
    "How late the rank entered a collective after the first rank of its group entered it "
    "(missed=true: it had not entered when the comparison closed; a lower bound)",
    SYNC_BUCKETS_S,
    (JOB, RANK, GROUP, MISSED),
)
VERDICTS = InstrumentSpec(
    "trainprobe.verdicts", "counter", "{verdict}", "Non-OK verdicts given, one per rank and episode"
)
ACTIONS = InstrumentSpec(
    "trainprobe.actions", "counter", "{action}", "Actions carried out, by outcome"
)
HEARTBEAT_AGE = InstrumentSpec(
    "trainprobe.heartbeat.age", "gauge", "s", "Seconds since the worker's last report"
)
STEP_RATE = InstrumentSpec("trainprobe.step.rate", "gauge", "{step}/s", "Steps per second")
LAST_STEP = InstrumentSpec("trainprobe.step.last", "gauge", "{step}", "Last completed step")
WORKERS = InstrumentSpec(
    "trainprobe.workers", "gauge", "{worker}", "Workers known to the sidecar, by verdict"
)
GPU_MEMORY_USAGE = InstrumentSpec(
    "hw.gpu.memory.usage",
    "updown",
    "By",
    "GPU memory used (NVML, whole device; without NVML the worker's torch reserved bytes)",
)
GPU_MEMORY_LIMIT = InstrumentSpec("hw.gpu.memory.limit", "updown", "By", "GPU memory size")

#: The sidecar's own load (core/session/overload.py): 1 while it sheds late reports.
OVERLOADED = InstrumentSpec(
    "trainprobe.sidecar.overloaded",
    "gauge",
    "1",
    "1 while the sidecar sheds reports it got too late to apply in full (last 10 s), else 0",
)
REPORTS_SHED = InstrumentSpec(
    "trainprobe.sidecar.reports.shed",
    "gauge",
    "{report}",
    "Reports applied for liveness only since the sidecar started (they came too late)",
)
INGEST_LAG = InstrumentSpec(
    "trainprobe.sidecar.ingest.lag",
    "gauge",
    "s",
    "The largest lag from a report's send to the sidecar applying it, over the last 10-20 s",
)
#: The sidecar's own lateness (core/session/pace.py): the rules judge that much earlier.
BEHIND = InstrumentSpec(
    "trainprobe.sidecar.behind",
    "gauge",
    "1",
    "1 while the sidecar is behind its reports (its own lag >= 0.5 s lately), else 0",
)
OWN_LAG = InstrumentSpec(
    "trainprobe.sidecar.own_lag",
    "gauge",
    "s",
    "The sidecar's own lateness (tick lag, ingest-lag floor) over the last 10 s: "
    "verdicts that are ages are judged that much later",
)
VERDICTS_DEFERRED = InstrumentSpec(
    "trainprobe.sidecar.verdicts.deferred",
    "gauge",
    "{verdict}",
    "Verdicts the sidecar's own lateness deferred since it started",
)
#: Summary mode (sync/): a node's stream to its upstream, and the upstream's
#: hub. At the upstream, job-level only: no node or rank label (20,000 nodes,
#: 100,000 ranks); jobs are bounded by limits.MAX_SYNC_JOBS.
SYNC_CONNECTED = InstrumentSpec(
    "trainprobe.jobsync.connected", "gauge", "1", "1 while the JobSync stream to the upstream is up"
)
SYNC_LOST = InstrumentSpec(
    "trainprobe.jobsync.lost", "gauge", "1", "1 while the upstream is lost (down over 30 s)"
)
SYNC_NODES = InstrumentSpec(
    "trainprobe.jobsync.nodes", "gauge", "{node}", "Nodes with a JobSync stream to this upstream"
)
SYNC_RANKS = InstrumentSpec(
    "trainprobe.jobsync.ranks", "gauge", "{rank}", "Ranks this upstream holds, by job"
)
SYNC_REFUSED = InstrumentSpec(
    "trainprobe.jobsync.refused", "gauge", "{stream}", "JobSync streams refused since start"
)
SYNC_MISSED = InstrumentSpec(
    "trainprobe.jobsync.pushes.missed", "gauge", "{push}", "Pushes a node's full outbox missed"
)

INSTRUMENTS: tuple[InstrumentSpec, ...] = (
    STEP_DURATION,
    SYNC_DURATION,
    ARRIVAL_LAG,
    VERDICTS,
    ACTIONS,
    HEARTBEAT_AGE,
    STEP_RATE,
    LAST_STEP,
    WORKERS,
    GPU_MEMORY_USAGE,
    GPU_MEMORY_LIMIT,
    OVERLOADED,
    REPORTS_SHED,
    INGEST_LAG,
    BEHIND,
    OWN_LAG,
    VERDICTS_DEFERRED,
    SYNC_CONNECTED,
    SYNC_LOST,
    SYNC_NODES,
    SYNC_RANKS,
    SYNC_REFUSED,
    SYNC_MISSED,
)

Point = tuple[float, Mapping[str, AttrValue]]


def worker_metric_attributes(hello: HelloData) -> dict[str, AttrValue]:
    """Few attributes on worker metrics: enough to tell series apart, cheap to keep."""
    return {JOB: hello.job_id, RANK: hello.rank}


def step_observations(report: ReportData) -> list[float]:
    """Step times of the report's window (0 = a step the hook did not count)."""
    return [d for d in report.recent_step_s if d > 0]


def sync_observations(report: ReportData) -> list[tuple[float, str, str]]:
    """(seconds, group, op) of each sampled collective in the report."""
    if report.sync is None:
        return []
    return [
        ((c.end_mono_ns - c.start_mono_ns) / 1e9, c.group, c.op)
        for c in report.sync.samples
        if c.end_mono_ns >= c.start_mono_ns > 0
    ]


def verdict_count(incident: Incident) -> tuple[int, dict[str, AttrValue]]:
    # A Ray watcher incident names no ranks (Ray's tasks are not workers): it counts once.
    return len(incident.ranks) or 1, {
        "trainprobe.job_id": incident.job_id,
        "trainprobe.verdict": incident.verdict.value,
        "trainprobe.rule": incident.rule,
    }


def action_outcome(record: Mapping[str, object]) -> str:
    if record.get("dry_run"):
        return "dry_run"
    return "ok" if record.get("ok") else "failed"


def action_count(incident: Incident, record: Mapping[str, object]) -> dict[str, AttrValue]:
    return {
        "trainprobe.job_id": incident.job_id,
        "trainprobe.action": incident.action,
        "trainprobe.action.outcome": action_outcome(record),
    }


@dataclass(frozen=True)
class JobSyncLoad:
    """Summary mode's gauges: the node's stream (``link``: connected, lost) and the
    upstream's hub (``hub``: nodes, refused, missed pushes; ``ranks`` by job)."""

    link: tuple[bool, bool] | None = None
    hub: tuple[int, int, int] | None = None
    ranks: Mapping[str, int] = field(default_factory=dict)


@dataclass
class GaugeSnapshot:
    """Gauge values by instrument name, as (value, attributes) points."""

    points: dict[str, list[Point]] = field(default_factory=dict)

    def add(self, spec: InstrumentSpec, value: float, attrs: Mapping[str, AttrValue]) -> None:
        self.points.setdefault(spec.name, []).append((value, attrs))

    def get(self, spec: InstrumentSpec) -> list[Point]:
        return self.points.get(spec.name, [])


def gauge_snapshot(
    workers: Iterable[WorkerState],
    now: float,
    ingest: IngestLoad | None = None,
    sync: JobSyncLoad | None = None,
) -> GaugeSnapshot:
    """Gauges of every connected worker, and worker counts by verdict, at ``now``;
    the sidecar's own load from ``ingest``; summary mode's from ``sync``."""
    snap = GaugeSnapshot()
    if sync is not None and sync.link is not None:
        snap.add(SYNC_CONNECTED, float(sync.link[0]), {})
        snap.add(SYNC_LOST, float(sync.link[1]), {})
    if sync is not None and sync.hub is not None:
        for spec, value in zip((SYNC_NODES, SYNC_REFUSED, SYNC_MISSED), sync.hub, strict=True):
            snap.add(spec, float(value), {})
        for job, n in sync.ranks.items():
            snap.add(SYNC_RANKS, float(n), {JOB: job})
    if ingest is not None:
        snap.add(OVERLOADED, 1.0 if ingest.overloaded else 0.0, {})
        snap.add(REPORTS_SHED, float(ingest.shed), {})
        snap.add(INGEST_LAG, ingest.max_lag_s, {})
        snap.add(BEHIND, 1.0 if ingest.behind else 0.0, {})
        snap.add(OWN_LAG, ingest.own_lag_s, {})
        snap.add(VERDICTS_DEFERRED, float(ingest.deferred), {})
    counts: dict[tuple[str, str, str], int] = {}
    for w in workers:
        state = "connected" if w.connected else (w.ended or "disconnected")
        key = (w.hello.job_id, w.verdict.value, state)
        counts[key] = counts.get(key, 0) + 1
        if not w.connected:
            continue
        attrs = worker_metric_attributes(w.hello)
        snap.add(HEARTBEAT_AGE, max(0.0, now - w.last_report_at), attrs)
        snap.add(STEP_RATE, w.steps_per_s, attrs)
        if w.has_step:
            snap.add(LAST_STEP, w.last_step, attrs)
        gpu = w.last_report.gpu if w.last_report is not None else None
        if gpu is not None:
            gattrs = dict(attrs)
            if w.hello.gpu_uuid:
                gattrs["hw.id"] = w.hello.gpu_uuid
            used = gpu.device_used_bytes if gpu.has_nvml else gpu.reserved_bytes
            snap.add(GPU_MEMORY_USAGE, used, gattrs)
            if gpu.has_nvml and gpu.device_total_bytes:
                snap.add(GPU_MEMORY_LIMIT, gpu.device_total_bytes, gattrs)
    for (job, verdict, state), n in counts.items():
        snap.add(
            WORKERS,
            n,
            {"trainprobe.job_id": job, "trainprobe.verdict": verdict, "trainprobe.state": state},
        )
    return snap
