"""Whether an incident-log record has the shape the readers rely on.

The log is ours, but a file anyone could have edited, copied or cut: a record
of a known type may still carry ``"culprits": 5``, a string for a diagnosis,
an outcome that is not an object, a time of 1e400 or NaN, or nesting deep
enough to exhaust the stack. :func:`shape_problem` names the first such field
so that the record is skipped with one line, and every other one is shown.
Only the fields ``trainprobe incidents`` and ``report`` read are checked;
unknown fields are kept as they are (a newer sidecar may add some).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from trainprobe.sidecar.core.limits import MAX_DURATION_S

__all__ = ["MAX_DEPTH", "MAX_TIME", "shape_problem"]

#: Deepest nesting of objects and arrays in a record (the sidecar writes 4).
MAX_DEPTH = 16
#: Latest wall time a record may carry: the year 3000 (datetime and matplotlib
#: fail on a later one, or on an infinite one).
MAX_TIME = 32_503_680_000.0

Check = Callable[[Any], bool]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _duration(v: Any) -> bool:
    # Added to a wall time: a year at most, either way, keeps the sum a date.
    return _number(v) and abs(v) <= MAX_DURATION_S


def _time(v: Any) -> bool:
    return _number(v) and 0 <= v <= MAX_TIME


def _ints(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) for x in v)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _scalar(v: Any) -> bool:
    # Text that is printed: a number or a string, never a structure to walk.
    return isinstance(v, (str, int, float))


def _text_map(v: Any) -> bool:
    return isinstance(v, dict) and all(_scalar(x) for x in v.values())


def _outcome(o: Any) -> bool:
    return isinstance(o, dict) and _fields(o, _OUTCOME) is None


def _outcomes(v: Any) -> bool:
    return isinstance(v, dict) and all(_outcome(o) for o in v.values())


def _evidence(v: Any) -> bool:
    return isinstance(v, dict) and all(
        not isinstance(e, dict) or _fields(e, _EVIDENCE) is None for e in v.values()
    )


def _diagnosis(v: Any) -> bool:
    return isinstance(v, dict) and _fields(v, _DIAGNOSIS) is None


def _watch(v: Any) -> bool:
    return isinstance(v, dict) and _fields(v, _WATCH) is None


_OUTCOME: dict[str, Check] = {
    "signals": _strs,
    "method": _str,  # joined to text
    "seconds": _number,
    "error": _scalar,
}
_EVIDENCE: dict[str, Check] = {
    "label": _scalar,
    "state": _scalar,
    "where": _scalar,
    "samples": _scalar,
    "cpu_ratio": _scalar,
    "stack_same": _scalar,  # looked up in a table: a list is unhashable
}
_DIAGNOSIS: dict[str, Check] = {
    "where": _text_map,
    "culprits": _ints,
    "waiting": _ints,
    "text": _scalar,
    "summary": _scalar,
    "kind": _scalar,
}
_WATCH: dict[str, Check] = {"evidence": _evidence, "why": _scalar, "rule": _scalar}
#: Per record type: field -> the check its value must pass when present and not null.
_SHAPES: dict[str, dict[str, Check]] = {
    "incident": {
        "time": _time,
        "job_id": _scalar,
        "job_name": _scalar,
        "rule": _scalar,
        "verdict": _scalar,
        "culprits": _ints,
        "waiting": _ints,
        "ranks": _ints,
        "pids": _ints,
        "diagnosis": _diagnosis,
        "decision": _watch,
        "action": _scalar,
        "action_reason": _scalar,
        "detection_latency_s": _duration,
    },
    "incident_update": {"verdict": _scalar, "rule": _scalar, "ranks": _ints},
    "decision": {
        "rule": _scalar,
        "decided_after_s": _duration,
        "stalled_s": _duration,
        "paused_s": _duration,
        "why": _scalar,
        "evidence": _evidence,
    },
    "action": {"action": _scalar, "outcomes": _outcomes},
    "recovery": {
        "rank": _scalar,
        "new_pid": _scalar,
        "first_step": _scalar,
        "resumed_after_s": _duration,
    },
}


#: Fields read whenever present, null or not (``list(incident["culprits"])``).
_NOT_NULL = frozenset({"culprits", "waiting"})


def _fields(rec: dict[str, Any], shape: dict[str, Check]) -> str | None:
    for name, check in shape.items():
        value = rec.get(name)
        if (value is not None or (name in _NOT_NULL and name in rec)) and not check(value):
            return name
    return None


def _too_deep(value: Any) -> bool:
    # Iterative: a record nested past the stack must not exhaust it here either.
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(v, dict):
            todo.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            todo.extend((x, depth + 1) for x in v)
    return False


def shape_problem(rec: dict[str, Any]) -> str | None:
    """What is wrong with ``rec``'s shape (a record of a known type), or None."""
    if _too_deep(rec):
        return f"nested deeper than {MAX_DEPTH} levels"
    bad = _fields(rec, _SHAPES.get(str(rec.get("type")), {}))
    if bad is not None:
        return f"its {bad!r} has an unexpected shape"
    return None
