"""What the upstream refuses in a node's summaries and episode notes (summary mode).

Every string, count and number a node sends is checked against
:mod:`~trainprobe.sidecar.core.limits` before the hub keeps any of it: a
node is a client, and its summaries feed the analysis that names culprits.

Pure: plain values in, a reason (or None) out.
"""

from __future__ import annotations

import math

from trainprobe.sidecar.core import limits
from trainprobe.sidecar.core.job.view import EpisodeNote
from trainprobe.sidecar.core.judge.diagnosis import RankSummary

__all__ = ["note_problem", "problem", "text_problem"]

_VERDICTS = frozenset({"OK", "DEGRADED", "UNRESPONSIVE", "HUNG", "DEAD"})
_ENDED = frozenset({"", "goodbye", "vanished", "rejected"})
_KERNEL = frozenset({"", "running", "stopped", "traced", "frozen"})


def text_problem(value: str, what: str, limit: int = limits.MAX_ID_LEN) -> str | None:
    return f"{what} longer than {limit} characters" if len(value) > limit else None


def _age(value: float, what: str) -> str | None:
    ok = math.isfinite(value) and 0.0 <= value <= limits.MAX_DURATION_S
    return None if ok else f"{what}={value!r} is not an age"


def problem(s: RankSummary) -> str | None:
    """Why ``s`` cannot be a rank's summary, or None."""
    if not 0 < s.world_size <= limits.MAX_WORLD_SIZE or not 0 <= s.rank < s.world_size:
        return f"rank {s.rank} of world size {s.world_size}"
    if s.pid < 0 or s.step < 0:
        return "a negative pid or step"
    if s.verdict not in _VERDICTS or s.ended not in _ENDED or s.kernel not in _KERNEL:
        return "an unknown verdict, ending or kernel word"
    if len(s.phases) > limits.MAX_PHASES or len(s.groups) > limits.MAX_GROUPS:
        return "too many phases or groups"
    for value, what in ((s.host, "host"), (s.node, "node"), (s.replica, "replica")):
        if err := text_problem(value, what):
            return err
    if err := text_problem(s.ft_wait, "ft_wait"):
        return err
    for name in s.phases:
        if err := text_problem(name, "a phase"):
            return err
    ages = [s.report_age_s, s.step_age_s, s.ft_wait_age_s, s.normal_step_s, s.kernel_age_s]
    for g in s.groups:
        if err := text_problem(g.group, "a group") or text_problem(g.inflight_op, "an op"):
            return err
        if min(g.issued, g.completed, g.inflight_seq) < 0:
            return "a negative collective count"
        ages.append(0.0 if g.inflight_age_s is None else g.inflight_age_s)
    for age in ages:
        if err := _age(age, "an age"):
            return err
    return None


def note_problem(note: EpisodeNote, job_id: str) -> str | None:
    if note.job_id != job_id:
        return "an episode note of another job"
    for value, what in ((note.id, "id"), (note.opened_by, "opened_by"), (note.rule, "rule")):
        if err := text_problem(value, f"the note's {what}"):
            return err
    if err := text_problem(note.verdict, "verdict") or text_problem(note.kind, "kind"):
        return err
    if len(note.culprits) > limits.MAX_NOTE_RANKS or len(note.where) > limits.MAX_NOTE_RANKS:
        return "a note naming too many ranks"
    places = [note.text, *note.where.values()]
    too_long = (text_problem(p, "note text", limits.MAX_NOTE_TEXT) for p in places)
    return next((e for e in too_long if e), None)
