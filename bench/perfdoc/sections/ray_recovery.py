"""Ray Train + TorchftConfig: how soon the survivor commits again (rows of the recovery
table), under trainprobe's lighthouse settings, beside Ray's example's and the figures
from before a stopped worker was SIGKILLed ahead of ``ray.kill``."""

from __future__ import annotations

from ..core import Lines, Result, command, row, s, yes

__all__ = ["ray_survivor_command", "ray_survivor_goals", "ray_survivor_rows", "ray_survivor_where"]

#: (fault, label, goal in s): the survivors' goals, the torchrun figures.
CASES = (("stop", "SIGSTOP", 3.0), ("sleep", "sleep", 12.0))


def _ok(g: Result) -> bool:
    x = g.get("survivor_resumed_s")
    return (
        x is not None
        and x <= g.get("survivor_goal_s", 0)
        and g["survivor_same_pid"]
        and g["single_group_replacement"]
    )


def ray_survivor_goals(r: Result) -> list[tuple[str, str, str, str, bool]]:
    """(name, goal, measured, anchor, met) for the headline table."""
    ray = r["summary"]["ray"]
    got = [ray.get(k) for k, _, _ in CASES]
    if not all(got):
        return []
    theirs = [s((ray.get(f"{k}/ray") or {}).get("survivor_resumed_s")) for k, _, _ in CASES]
    return [
        (
            "Ray Train survivors commit again",
            "≤ 3 s definitive, ≤ 12 s ambiguous, same pid, one group replaced",
            "medians " + ", ".join(s(g["survivor_resumed_s"]) for g in got if g),
            "Ray's example's lighthouse: " + ", ".join(theirs),
            all(_ok(g) for g in got if g),
        )
    ]


def ray_survivor_rows(r: Result | None, before: Result | None) -> Lines:
    """One row per fault: now (where the time goes), before, and Ray's example's lighthouse."""
    if r is None:
        return []
    ray, old = r["summary"]["ray"], ((before or {}).get("summary") or {}).get("ray") or {}
    out = []
    for key, label, goal in CASES:
        g = ray.get(key)
        if g is None:
            continue
        theirs = (ray.get(f"{key}/ray") or {}).get("survivor_resumed_s")
        out.append(
            row(
                f"Ray Train `TorchftConfig`, {label}: survivor commits again",
                f"**{s(g['survivor_resumed_s'])}** (incident {s(g.get('incident_s'))}, kill "
                f"{s(g.get('kill_s'))}, culprit gone to commit {s(g.get('survivor_after_gone_s'))}"
                f"); same pid, one group replaced in {g['trials']} of {g['trials']}"
                if _ok(g) or g["survivor_same_pid"] else f"**{s(g['survivor_resumed_s'])}**",
                f"before: {s((old.get(key) or {}).get('survivor_resumed_s'))}; Ray's example's "
                f"lighthouse (5 s): {s(theirs)}",
                f"≤ {goal:g} s", yes(_ok(g)),
            )
        )  # fmt: skip
    return out


def ray_survivor_command(r: Result | None) -> Lines:
    return [command(r, "torchft_ray")] if r is not None else []


def ray_survivor_where(r: Result | None, before: Result | None) -> str:
    """The Ray Train trials' machine load, for the section's footnote."""
    if r is None:
        return ""

    def load(x: Result) -> str:
        lb, la = x.get("load_before") or ["?"], x.get("load_after") or ["?"]
        return f"load {lb[0]} to {la[0]}"

    was = f" (before: {load(before)})" if before else ""
    return f"; the Ray Train survivors: {load(r)}{was}"
