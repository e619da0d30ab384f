"""What an incident and its action say as span attributes.

A backend searches attributes, not JSON: the verdict, rule, ranks, culprits,
the decision to act now or wait, and each rank's evidence and outcome are
flattened into ``trainprobe.*`` attributes of scalars, while the whole
evidence and diagnosis also go in as JSON (cut at 16,384 characters). Only
the first :data:`FLAT_EVIDENCE_RANKS` ranks are flattened, so a job-wide
incident does not make thousands of attributes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.otel.traces.spans import AttrValue

__all__ = [
    "FLAT_EVIDENCE_RANKS",
    "action_attributes",
    "incident_attributes",
    "json_attribute",
    "link_why",
    "scalar",
]

#: Ranks whose evidence is also flattened into attributes (all are in the JSON).
FLAT_EVIDENCE_RANKS = 16
_MAX_JSON = 16_384


def scalar(value: object) -> AttrValue | None:
    if isinstance(value, (str, bool, int, float)):
        return value
    return None


def json_attribute(value: object) -> str:
    text = json.dumps(value, default=str, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= _MAX_JSON else text[: _MAX_JSON - 3] + "..."


def incident_attributes(incident: Incident, step: int) -> dict[str, AttrValue]:
    """The incident's verdict, rule, evidence and action, as span attributes."""
    attrs: dict[str, AttrValue] = {
        "trainprobe.incident.id": incident.id,
        "trainprobe.job_id": incident.job_id,
        "trainprobe.rule": incident.rule,
        "trainprobe.verdict": incident.verdict.value,
        "trainprobe.step": step,
        "trainprobe.ranks": list(incident.ranks),
        "trainprobe.culprits": incident.culprits,
        "trainprobe.waiting": incident.waiting,
        "trainprobe.pids": list(incident.pids),
        "trainprobe.hosts": list(incident.hosts),
        "trainprobe.targets": list(incident.targets),
        "trainprobe.action": incident.action,
        "trainprobe.action.reason": incident.action_reason,
        "trainprobe.dry_run": incident.dry_run,
        "trainprobe.detection_latency_s": round(incident.detection_latency_s, 6),
        "trainprobe.evidence": json_attribute(incident.evidence),
    }
    for rank in sorted(incident.evidence, key=lambda r: int(r) if r.isdigit() else 0)[
        :FLAT_EVIDENCE_RANKS
    ]:
        for key, value in incident.evidence[rank].items():
            v = scalar(value)
            if v is not None:
                attrs[f"trainprobe.evidence.{rank}.{key}"] = v
    if incident.diagnosis is not None:
        attrs["trainprobe.diagnosis"] = json_attribute(incident.diagnosis)
    if incident.decision:
        # Kill now or wait (issue 12): searchable without parsing the JSON.
        for key in ("act", "rule", "definitive", "why", "patience_s", "patience_basis"):
            v = scalar(incident.decision.get(key))
            if v is not None:
                attrs[f"trainprobe.decision.{key}"] = v
        attrs["trainprobe.decision"] = json_attribute(incident.decision)
    return attrs


def action_attributes(incident: Incident, record: Mapping[str, object]) -> dict[str, AttrValue]:
    """A carried-out action's record (its outcomes per rank, the ranks that did
    not answer, the replicas evicted), as span attributes."""
    ok = bool(record.get("ok"))
    attrs: dict[str, AttrValue] = {
        "trainprobe.incident.id": incident.id,
        "trainprobe.job_id": incident.job_id,
        "trainprobe.action": incident.action,
        "trainprobe.action.ok": ok,
        "trainprobe.dry_run": bool(record.get("dry_run", incident.dry_run)),
        "trainprobe.targets": list(incident.targets),
    }
    outcomes = record.get("outcomes")
    if isinstance(outcomes, Mapping):
        for rank, outcome in outcomes.items():
            if isinstance(outcome, Mapping):
                for key, value in outcome.items():
                    v = scalar(value)
                    if v is not None:
                        attrs[f"trainprobe.outcome.{rank}.{key}"] = v
    unanswered = record.get("unanswered")
    if isinstance(unanswered, list):
        attrs["trainprobe.unanswered"] = [int(r) for r in unanswered]
    evicted = record.get("evicted_replicas")
    if isinstance(evicted, list):
        # "replica R evicted; N replicas go on": the job was not restarted.
        attrs["trainprobe.replicas.evicted"] = [str(r) for r in evicted]
        attrs["trainprobe.replicas.left"] = int(record.get("replicas_left") or 0)  # type: ignore[call-overload]
        attrs["trainprobe.action.summary"] = str(record.get("summary", ""))
    return attrs


def link_why(rank: int, kind: str) -> dict[str, AttrValue]:
    """A link's attributes: which rank, and why the incident points there."""
    return {"trainprobe.rank": rank, "trainprobe.link": kind}
