"""One incident's timeline, record by record (``trainprobe incidents --id``,
``trainprobe report``): the verdict, each evidence round rank by rank, the
decision, the action and what it left alone, and the recovery after it."""

from __future__ import annotations

from typing import Any

from trainprobe.sidecar.cli.incidents.story import (
    IncidentStory,
    _culprits,
    _outcome,
    _secs,
    _waiting,
    _when,
    culprit_line,
)
from trainprobe.sidecar.core.jobnames import job_label
from trainprobe.sidecar.core.text import printable

__all__ = ["timeline"]


def timeline(story: IncidentStory) -> list[str]:
    """One incident, record by record: verdict, evidence samples, decision, action."""
    inc = story.incident
    diag = inc.get("diagnosis") or {}
    job = job_label(str(inc.get("job_id")), str(inc.get("job_name") or ""))
    out = [
        f"incident {story.id}  job {job}  {_when(inc.get('time'))}",
        f"  verdict   {inc.get('verdict')} ({inc.get('rule')}), "
        f"{_secs(inc.get('detection_latency_s'))} after onset; ranks flagged "
        f"{inc.get('ranks')}, culprits {_culprits(inc)}, waiting {_waiting(inc)}",
    ]
    if diag:
        out.append(f"  diagnosis {diag.get('kind')}: {diag.get('text') or diag.get('summary')}")
    if line := culprit_line(inc):
        out.append(f"  {line}")
    watch = inc.get("decision") or {}
    if watch:
        out.append(f"  decision  {'act' if watch.get('act') else 'watch'}: {watch.get('why', '')}")
        out += _evidence(watch.get("evidence") or {})
    out.append(f"  action    {inc.get('action')}: {inc.get('action_reason') or ''}".rstrip(": "))
    for r in story.later:
        kind = r.get("type")
        if kind == "incident_update":
            out.append(f"  update    {r.get('verdict')} ({r.get('rule')}) ranks {r.get('ranks')}")
        elif kind == "decision":
            out.append(
                f"  decision  {'act' if r.get('act') else 'no action'} by {r.get('rule')} "
                f"after {_secs(r.get('decided_after_s', r.get('stalled_s')))}: {r.get('why', '')}"
            )
            out += _evidence(r.get("evidence") or {})
        elif kind == "action":
            out.append(f"  action    {r.get('action')} done: {_outcome([r], detail=True)}")
            out += _left_alone(r)
        elif kind == "recovery":
            out.append(
                f"  recovery  rank {r.get('rank')} back as pid {r.get('new_pid')}, first step "
                f"{r.get('first_step')} {_secs(r.get('resumed_after_s'))} after the kill"
            )
    return [printable(line) for line in out]


#: An evidence round's stack comparison (None: no stack read, or only one).
_STACK: dict[object, str] = {True: "stack unchanged", False: "stack moved"}


def _cpu(ratio: object) -> str:
    # None: one sample, which proves no motion either way.
    return "cpu not read" if ratio is None else f"cpu {ratio}"


def _evidence(per_rank: dict[str, Any]) -> list[str]:
    out = []
    for rank, ev in sorted(per_rank.items(), key=lambda x: str(x[0])):
        if not isinstance(ev, dict):
            continue
        out.append(
            f"    rank {rank}: {ev.get('label') or ev.get('state')}, process {ev.get('state')}, "
            f"{_cpu(ev.get('cpu_ratio'))}, {_STACK.get(ev.get('stack_same'), 'stack not read')}, "
            f"{ev.get('samples')} samples" + (f", at {ev['where']}" if ev.get("where") else "")
        )
    return out


def _left_alone(action: dict[str, Any]) -> list[str]:
    """A line for each descendant a kill left alone: its worker could not signal it."""
    out = []
    for rank, o in sorted((action.get("outcomes") or {}).items(), key=lambda x: str(x[0])):
        left = o.get("skipped") if isinstance(o, dict) else None
        for s in left if isinstance(left, list) else []:
            if isinstance(s, dict):
                who = f"rank {rank}'s descendant pid {s.get('pid')} ({s.get('name')})"
                out.append(f"  left      {who} alone: {s.get('reason')}")
    return out
