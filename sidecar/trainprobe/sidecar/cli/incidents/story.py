"""``trainprobe incidents``: what happened, read back from the incident log.

One line per incident (when, job, culprit and where, verdict, decision,
action and outcome, time to verdict and to action); one incident's timeline
is :mod:`.incident_timeline`'s. The log is the sidecar's own JSON Lines file, read as a stream by
:mod:`.log_stream`: a line that is not one of its records (a torn write, a
foreign line, a record of an unexpected shape) is named on stderr and
skipped, and every other record is still shown.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainprobe.sidecar.core.incident.actions import is_destructive
from trainprobe.sidecar.core.jobnames import job_label, names_of, resolve_job
from trainprobe.sidecar.core.text import printable

__all__ = [
    "IncidentStory",
    "culprit_line",
    "of_job",
    "parse_since",
    "stories",
    "summary_line",
]

#: The record types the sidecar writes; any other line is foreign.
KINDS = ("incident", "incident_update", "decision", "action", "recovery")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class IncidentStory:
    """An incident and every later record that names it."""

    incident: dict[str, Any]
    later: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.incident.get("id", ""))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.later if r.get("type") == kind]

    def decided(self) -> dict[str, Any] | None:
        """The decision that acted (or said the stall ended by itself), if any."""
        ds = self.of("decision")
        return next((d for d in ds if d.get("act")), ds[-1] if ds else None)

    def to_json(self) -> dict[str, Any]:
        inc, diag = self.incident, self.incident.get("diagnosis") or {}
        d = self.decided()
        actions = self.of("action")
        return {
            "id": self.id,
            "time": inc.get("time"),
            "job_id": inc.get("job_id"),
            "job_name": inc.get("job_name") or "",
            "rule": inc.get("rule"),
            "verdict": inc.get("verdict"),
            "culprits": _culprits(inc),
            "waiting": _waiting(inc),
            "where": diag.get("where") or {},
            "diagnosis": diag.get("text") or diag.get("summary") or "",
            "decision": (d or inc.get("decision") or {}).get("rule"),
            "action": inc.get("action"),
            "outcome": _outcome(actions) if actions else None,
            "verdict_after_s": inc.get("detection_latency_s"),
            "action_after_s": _action_after_s(inc, d, actions),
            # When the stall began, and the patience a kill waits for at most.
            "onset": _onset(inc),
            "patience_s": (inc.get("decision") or {}).get("patience_s"),
        }


def _onset(inc: dict[str, Any]) -> float | None:
    t, latency = inc.get("time"), inc.get("detection_latency_s") or 0.0
    if not isinstance(t, (int, float)) or not isinstance(latency, (int, float)):
        return None
    return float(t) - float(latency)


def _culprits(inc: dict[str, Any]) -> list[int]:
    if "culprits" in inc:
        return list(inc["culprits"])
    diag = inc.get("diagnosis") or {}
    return list(diag.get("culprits") or [])


def _waiting(inc: dict[str, Any]) -> list[int]:
    if "waiting" in inc:
        return list(inc["waiting"])
    return list((inc.get("diagnosis") or {}).get("waiting") or [])


def _outcome(actions: list[dict[str, Any]], detail: bool = False) -> str:
    parts = []
    for a in actions:
        if a.get("dry_run"):
            parts.append("dry run")
            continue
        for rank, o in sorted((a.get("outcomes") or {}).items(), key=lambda x: str(x[0])):
            done = "exited" if o.get("exited") or o.get("pid_gone") else "NOT exited"
            how = ""
            if detail:  # pid, signals (or Ray's method) and how long it took
                steps = " -> ".join(o.get("signals") or []) or o.get("method") or ""
                took = f" in {o['seconds']} s" if o.get("seconds") is not None else ""
                how = f" (pid {o.get('pid')}{', ' + steps if steps else ''}{took})"
            error = f" ({o['error']})" if o.get("error") else ""
            parts.append(f"rank {rank} {done}{how}{error}")
    return ", ".join(parts) or "no outcome"


def _action_after_s(
    inc: dict[str, Any], decision: dict[str, Any] | None, actions: list[dict[str, Any]]
) -> float | None:
    if decision is not None and decision.get("act"):
        return decision.get("decided_after_s")
    if actions:  # acted at the verdict: no decision record in between
        return inc.get("detection_latency_s")
    return None


def stories(records: Iterable[dict[str, Any]]) -> list[IncidentStory]:
    """Incidents in log order, each with its later records."""
    by_id: dict[str, IncidentStory] = {}
    for r in records:
        if r.get("type") == "incident":
            by_id.setdefault(str(r["id"]), IncidentStory(r))
        elif (story := by_id.get(str(r.get("incident_id")))) is not None:
            story.later.append(r)
    return list(by_id.values())


def of_job(found: list[IncidentStory], ref: str) -> list[IncidentStory]:
    """The stories of the job ``ref`` names, by id or by name (``core/jobnames.py``:
    an id or a name that several jobs have raises AmbiguousJob)."""
    names = names_of(
        (str(s.incident.get("job_id")), str(s.incident.get("job_name") or "")) for s in found
    )
    job = resolve_job(ref, names)
    return [s for s in found if s.incident.get("job_id") == job]


def parse_since(text: str, now: float | None = None) -> float:
    """A wall time from ``2h``/``30m``/``90s``/``1d`` ago, or an ISO date or date-time."""
    now = time.time() if now is None else now
    m = _DURATION.match(text.strip())
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(
            f"--since {text!r}: use a duration (90s, 30m, 2h, 1d) or an ISO time "
            "(2026-05-01 or 2026-05-01T14:30)"
        ) from None


def _when(t: object) -> str:
    if not isinstance(t, (int, float)):
        return "?"
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _secs(v: object) -> str:
    return f"{v:.1f}s" if isinstance(v, (int, float)) else "-"


def culprit_line(incident: dict[str, Any]) -> str:
    """Who broke the job and where it is stuck, from an incident record; '' without culprit."""
    culprits = _culprits(incident)
    if not culprits:
        return ""
    diag = incident.get("diagnosis") or {}
    where = diag.get("where") or {}
    pids = dict(zip(incident.get("ranks") or [], incident.get("pids") or [], strict=False))
    parts = []
    for rank in culprits:
        pid = f" (pid {pids[rank]})" if rank in pids else ""
        at = f" stuck at {where[str(rank)]}" if where.get(str(rank)) else ""
        parts.append(f"rank {rank}{pid}{at}")
    waiting = _waiting(incident)
    tail = f"; rank(s) {waiting} wait for it" if waiting else ""
    kind = f" ({diag['kind']})" if diag.get("kind") else ""
    return printable(f"culprit{kind}: {', '.join(parts)}{tail}")


#: How long past its patience a kill not yet in the log still reads as pending
#: (the evidence round and the kill itself take seconds).
PENDING_GRACE_S = 15.0


def _act(j: dict[str, Any], now: float | None = None) -> str:
    """The action and what became of it: a kill that never ran (the stall ended
    by itself, or the patience never ran out) must not read as a kill, nor one
    that still waits for its evidence or patience as one that never will."""
    action = str(j["action"])
    if j["outcome"]:
        return f"{action}: {j['outcome']}"
    if not is_destructive(action):
        return action
    if j["decision"] == "resumed":
        return f"{action}: not needed (resumed)"
    patience, onset = j.get("patience_s"), j.get("onset")
    now = time.time() if now is None else now
    if (
        isinstance(patience, (int, float))
        and isinstance(onset, (int, float))
        and now < onset + patience + PENDING_GRACE_S
    ):
        return f"{action}: pending (once sure: definitive evidence, or {patience:.0f}s stalled)"
    return f"{action}: not done"


def summary_line(story: IncidentStory) -> str:
    j = story.to_json()
    who = ",".join(str(r) for r in j["culprits"]) or "-"
    where = next(iter(j["where"].values()), "") if j["culprits"] else ""
    culprit = f"rank {who}" + (f" at {where}" if where else "")
    act = _act(j)
    text = (
        f"{_when(j['time'])}  {j['id']}  job {job_label(str(j['job_id']), j['job_name'])}  "
        f"{j['verdict']} ({j['rule']})  "
        f"culprit {culprit}  decision {j['decision'] or '-'}  {act}  "
        f"verdict {_secs(j['verdict_after_s'])} action {_secs(j['action_after_s'])}"
    )
    return printable(text)
