"""From findings to incidents: edge-triggering and grouping.

A rule that keeps firing for the same worker is one episode, not one incident
per tick. An episode ends when its rule stops firing (the step advanced, the
report came). New episodes of the same job, rule and verdict that start in the
same tick are one incident: the ranks of a hung job stall together.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainprobe.sidecar.core.incident.actions import Action, is_destructive
from trainprobe.sidecar.core.session.model import (
    WAITING_RULE,
    Finding,
    Verdict,
    WorkerKey,
    WorkerState,
)

_ids = itertools.count(1)
_PREFIX = f"{os.getpid():x}"


def next_incident_id() -> str:
    """A new incident id, unique within this sidecar process (pid prefix)."""
    return f"{_PREFIX}-{next(_ids)}"


@dataclass
class Incident:
    """One detection: the unit written to the incident log and exported."""

    id: str
    time: float
    detected_at: float
    job_id: str
    rule: str
    verdict: Verdict
    ranks: list[int]
    pids: list[int]
    hosts: list[str]
    evidence: dict[str, dict[str, object]]
    #: Sidecar-clock time the trouble most likely began (the last step, report...).
    onset_at: float
    action: str = Action.OBSERVE
    action_reason: str = ""
    dry_run: bool = False
    #: Ranks the action targets (all ranks, or the culprits once diagnosed).
    targets: list[int] = field(default_factory=list)
    diagnosis: dict[str, object] | None = None
    #: For a hang: whether to act now or watch, and on which evidence (core/judge/decision.py).
    decision: dict[str, object] | None = None
    #: How long after their send the reports it was judged on reached the rules
    #: (the sidecar's backlog, or a relay's batching), at most: part of the
    #: detection latency that is not the rule's own threshold.
    ingest_lag_s: float = 0.0
    #: The job's human name (its hooks' ``job_name``; '' where none was sent):
    #: ``--job`` takes it wherever it takes the id.
    job_name: str = ""

    @property
    def culprits(self) -> list[int]:
        """The ranks the trouble is with: the diagnosis's culprits once the job was
        diagnosed (none when it was inconclusive); before, the ranks the rule
        flagged, except under ``sync_inflight``, whose ranks wait in a collective."""
        if self.diagnosis is not None:
            return [int(r) for r in self.diagnosis.get("culprits") or []]  # type: ignore[attr-defined]
        return [] if self.rule == WAITING_RULE else list(self.ranks)

    @property
    def waiting(self) -> list[int]:
        """The ranks seen waiting for others in a collective (never culprits)."""
        if self.diagnosis is not None:
            return [int(r) for r in self.diagnosis.get("waiting") or []]  # type: ignore[attr-defined]
        return list(self.ranks) if self.rule == WAITING_RULE else []

    @property
    def detection_latency_s(self) -> float:
        return max(0.0, self.detected_at - self.onset_at)

    def action_when(self) -> str:
        """When the action happens, as the incident's log line says it after the
        action and its targets: a destructive one that waits for evidence or the
        patience must not read as done ("" where nothing is decided yet)."""
        d = self.decision
        if d is None or not is_destructive(self.action):
            return ""
        if d.get("act"):
            return f" now ({d.get('rule')})"
        patience = d.get("patience_s")
        limit = f"{patience:.0f}" if isinstance(patience, int | float) else "?"
        return f" once sure (definitive evidence, or {limit}s stalled)"

    def finding(self) -> dict[str, object]:
        """What the rule found, as the incident's record and each update of it say it."""
        return {
            "rule": self.rule,
            "verdict": self.verdict.value,
            # The ranks the rule flagged (kept as it was: tools read it); who is
            # at fault and who waits for it are culprits and waiting.
            "ranks": self.ranks,
            "culprits": self.culprits,
            "waiting": self.waiting,
            "pids": self.pids,
        }

    def to_record(self) -> dict[str, object]:
        """The JSON-ready object for the incident log."""
        return {
            "type": "incident",
            "id": self.id,
            "time": round(self.time, 6),
            "job_id": self.job_id,
            "job_name": self.job_name,
            **self.finding(),
            "hosts": self.hosts,
            "action": self.action,
            "action_reason": self.action_reason,
            "dry_run": self.dry_run,
            "targets": self.targets,
            "detection_latency_s": round(self.detection_latency_s, 3),
            "ingest_lag_s": round(self.ingest_lag_s, 3),
            "evidence": self.evidence,
            "diagnosis": self.diagnosis,
            "decision": self.decision,
        }


class FindingEdges:
    """Remembers which (worker, rule) pairs are firing, to report only edges."""

    def __init__(self) -> None:
        self._active: set[tuple[WorkerKey, str]] = set()

    def new_findings(self, findings: Sequence[Finding]) -> list[Finding]:
        current = {(f.key, f.rule) for f in findings}
        fresh = [f for f in findings if (f.key, f.rule) not in self._active]
        self._active = current
        return fresh


def onset_of(finding: Finding, state: WorkerState | None, now: float) -> float:
    """When the trouble behind a finding most likely started."""
    if state is None:
        return now
    ev = finding.evidence
    # Ages judged as of the last report's send (rules.py): the onset as the
    # reports show it, not as late as the sidecar got round to them.
    lag = ev.get("as_of_lag_s")
    if isinstance(lag, (int, float)) and lag > 0:
        now -= lag
    for name in (
        "step_age_s",
        "report_age_s",
        "inflight_age_s",
        "elapsed_s",
        "waited_s",
        "stuck_s",
    ):
        value = ev.get(name)
        if isinstance(value, (int, float)):
            limit = ev.get("timeout_s", ev.get("threshold_s", 0.0))
            if finding.rule == "phase_overrun" and isinstance(limit, (int, float)):
                return now - value + limit  # the phase became late at its deadline
            return now - value
    return now


def _job_name(fs: list[Finding], states: dict[WorkerKey, WorkerState]) -> str:
    """The job's name as its verified sessions give it, else as any of its sessions
    does: a client without a ticket in the job cannot rename it in the log."""
    job = fs[0].key.job_id
    sessions = sorted(
        (w for w in states.values() if w.key.job_id == job), key=lambda w: not w.verified
    )
    return next((w.hello.job_name for w in sessions if w.hello.job_name), "")


def _lag_of(f: Finding) -> float:
    lag = f.evidence.get("as_of_lag_s", 0.0)
    return float(lag) if isinstance(lag, (int, float)) else 0.0


def group_incidents(
    fresh: list[Finding],
    states: dict[WorkerKey, WorkerState],
    now: float,
    wall_now: float,
) -> list[Incident]:
    """One incident per (job, rule, verdict) among the fresh findings."""
    groups: dict[tuple[str, str, Verdict], list[Finding]] = {}
    for f in fresh:
        groups.setdefault((f.key.job_id, f.rule, f.verdict), []).append(f)
    incidents = []
    for (job, rule, verdict), fs in groups.items():
        fs.sort(key=lambda f: f.key.rank)
        hosts = sorted(
            {states[f.key].hello.host for f in fs if f.key in states and states[f.key].hello.host}
        )
        incidents.append(
            Incident(
                id=next_incident_id(),
                time=wall_now,
                detected_at=now,
                job_id=job,
                rule=rule,
                verdict=verdict,
                ranks=[f.key.rank for f in fs],
                pids=[f.pid for f in fs],
                hosts=hosts,
                evidence={str(f.key.rank): f.evidence for f in fs},
                onset_at=min(onset_of(f, states.get(f.key), now) for f in fs),
                targets=[f.key.rank for f in fs],
                ingest_lag_s=max(_lag_of(f) for f in fs),
                job_name=_job_name(fs, states),
            )
        )
    incidents.sort(key=lambda i: -i.verdict.severity)
    return incidents
