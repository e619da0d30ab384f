"""What ``trainprobe report`` says in words and marks on its timeline.

The "what happened" paragraph above the pictures (who, where, what was
done, when training resumed) and the timeline's events, recovery points
included, from the job's incident stories and, when the report sampled the
sidecar while it happened, the job's step in each sample. Plain functions
over plain data; every client string is escaped by the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from trainprobe.sidecar.cli.incidents.story import IncidentStory, _act

__all__ = ["HANG_VERDICTS", "events", "main_story", "what_happened"]

#: The verdicts of a hang: the incidents whose culprit the report names.
HANG_VERDICTS = ("HUNG", "UNRESPONSIVE")


def main_story(stories: Sequence[IncidentStory]) -> IncidentStory | None:
    """The job's latest hang (else its latest incident with a culprit): what the
    headline and the paragraph are about. A DEGRADED finding never outranks a hang."""
    hangs = [s for s in stories if s.incident.get("verdict") in HANG_VERDICTS]
    named = [s for s in hangs or stories if s.to_json()["culprits"]]
    return named[-1] if named else (hangs[-1] if hangs else None)


def events(
    stories: Sequence[IncidentStory],
    times: Sequence[float] = (),
    steps: Sequence[int | None] = (),
) -> list[tuple[float, str, str]]:
    """(wall time, label, kind) of each incident, its decisions, actions and
    recovery: kind ``incident``, ``decision``, ``action`` or ``recovery``.

    Only an incident record carries a wall time; a decision is placed by its
    seconds after onset (onset = the incident's time less its detection
    latency), and its action just after it. Training resumed: when the stall
    ended by itself (the ``resumed`` decision), when a killed rank's new
    process stepped (its ``recovery`` record), or else the first sample after
    the action in which the job's step had moved on."""
    out: list[tuple[float, str, str]] = []
    for s in stories:
        t = s.incident.get("time")
        if not isinstance(t, (int, float)):
            continue
        verdict = f"{s.id} {s.incident.get('verdict')} ({s.incident.get('rule')})"
        out.append((float(t), verdict, "incident"))
        onset = float(t) - float(s.incident.get("detection_latency_s") or 0.0)
        at = float(t)
        acted_at: float | None = None
        recovered = False
        for r in s.later:
            kind = r.get("type")
            if kind == "decision" and r.get("rule") == "resumed":
                took = r.get("stalled_s", r.get("paused_s"))
                if isinstance(took, (int, float)):
                    out.append((onset + float(took), f"{s.id} training resumed", "recovery"))
                    recovered = True
            elif kind == "decision" and isinstance(r.get("decided_after_s"), (int, float)):
                at = max(at, onset + float(r["decided_after_s"]))
                out.append((at, f"{s.id} decision: {r.get('rule')}", "decision"))
            elif kind == "action":
                acted_at = at
                out.append((at, f"{s.id} {r.get('action')}: {_outcome_text(r)}", "action"))
            elif kind == "recovery" and isinstance(r.get("resumed_after_s"), (int, float)):
                back = (acted_at or at) + float(r["resumed_after_s"])
                label = f"{s.id} rank {r.get('rank')} resumed (step {r.get('first_step')})"
                out.append((back, label, "recovery"))
                recovered = True
        if acted_at is not None and not recovered:
            resumed = _first_step_after(acted_at, times, steps)
            if resumed is not None:
                label = f"{s.id} training resumed (step {resumed[1]})"
                out.append((resumed[0], label, "recovery"))
    return sorted(out)


def _first_step_after(
    at: float, times: Sequence[float], steps: Sequence[int | None]
) -> tuple[float, int] | None:
    """The first sample after ``at`` whose step is past the job's step at ``at``."""
    before = [s for t, s in zip(times, steps, strict=False) if t <= at and s is not None]
    if not before:
        return None
    for t, s in zip(times, steps, strict=False):
        if t > at and s is not None and s > before[-1]:
            return t, s
    return None


def _outcome_text(record: dict[str, Any]) -> str:
    outs = record.get("outcomes") or {}
    gone = [
        str(k)
        for k, o in outs.items()
        if isinstance(o, dict) and (o.get("exited") or o.get("pid_gone"))
    ]
    return (
        f"rank(s) {', '.join(gone)} exited"
        if gone
        else ("dry run" if record.get("dry_run") else "done")
    )


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")


def what_happened(
    stories: Sequence[IncidentStory],
    times: Sequence[float] = (),
    steps: Sequence[int | None] = (),
) -> str:
    """A few sentences: who hung, where, what trainprobe did, when training resumed."""
    story = main_story(stories)
    if story is None:
        if stories:
            return f"No hang: {len(stories)} other incident(s), listed below."
        return "No incident of this job is in the log."
    j = story.to_json()
    inc = story.incident
    onset = j["onset"] if isinstance(j["onset"], (int, float)) else None
    culprits = j["culprits"]
    if culprits:
        where = j["where"].get(str(culprits[0])) if isinstance(j["where"], dict) else ""
        who = f"Rank {', '.join(str(r) for r in culprits)}"
        who += f" stopped making progress at {where}" if where else " stopped making progress"
    else:
        who = f"Ranks {inc.get('ranks')} stopped making progress (no single culprit named)"
    when = f" at {_clock(onset)}" if onset is not None else ""
    waiting = j["waiting"]
    wait = f"; rank(s) {waiting} waited for it" if waiting and culprits else ""
    named = j["verdict_after_s"]
    found = (
        f" trainprobe judged it {j['verdict']} ({j['rule']}) {named:.1f} s after it began."
        if isinstance(named, (int, float))
        else ""
    )
    act = _act(j)
    acted = j["action_after_s"]
    after = f", {acted:.1f} s after it began" if isinstance(acted, (int, float)) else ""
    did = f" Action: {act}{after}."
    recovery = [e for e in events([story], times, steps) if e[2] == "recovery"]
    if recovery:
        t, label, _ = recovery[0]
        detail = label.split(" ", 1)[1].removeprefix("training resumed").strip()
        sep = "" if not detail else " " if detail.startswith("(") else ": "
        resumed = f" Training resumed at {_clock(t)}{sep}{detail}."
    else:
        resumed = " No resumed training was seen (in the log or the samples)."
    return f"{who}{when}{wait}.{found}{did}{resumed}"
