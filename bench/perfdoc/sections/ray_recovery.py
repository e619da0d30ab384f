"""Ray Train + TorchftConfig: how soon the survivor commits again (rows of the recovery
table), under trainprobe's lighthouse settings, beside Ray's example's and the figures
from before a stopped worker was SIGKILLed ahead of ``ray.kill``; and a section of its
own: four replica groups after a SIGSTOP (``trainprobe run`` and Ray Train's one-liner)
and a rank of Ray Train's restarted group that hangs before its first step."""

from __future__ import annotations

from ..core import Lines, Result, command, head, row, s, yes

__all__ = [
    "ray_survivor_command",
    "ray_survivor_goals",
    "ray_survivor_rows",
    "ray_survivor_where",
    "replica_groups_section",
]

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


def _range(x: list[float] | None) -> str:
    return f"{x[0]:.2f}–{x[1]:.2f} s" if x else "–"


def _loads(r: Result | None, key: str) -> list[float]:
    trials = ((r or {}).get("trials") or {}).get(key) if key else (r or {}).get("trials")
    return [t[k] for t in trials or [] for k in ("load", "load1_before", "load1_after") if k in t]


def _le(x: float | None, goal: float | None) -> bool:
    return x is not None and goal is not None and x <= goal


def _launcher(r: Result) -> str:
    g = r["summary"]["faults"]["stop"]
    ok = _le(g["survivor_resumed_s"], g["goal_survivor_s"]) and g["survivor_same_pid"]
    ok = ok and g["params_equal"] and not g.get("failed_trials")
    return row(
        "4 groups, `trainprobe run --replicas 4`, SIGSTOP: survivors commit again",
        f"**{s(g['survivor_resumed_s'])}**; the evicted group steps {s(g['evicted_stepping_s'])}",
        f"{_range(g.get('survivors_resumed_s_range'))}"
        + (", same pids, params equal" if g["survivor_same_pid"] and g["params_equal"] else ""),
        f"{g.get('failed_trials', 0)} of {g['trials'] + g.get('failed_trials', 0)}",
        f"≤ {g['goal_survivor_s']:g} s", yes(ok),
    )  # fmt: skip


def _ray(r: Result) -> str:
    g = r["summary"]["ray"]["stop"]
    same = g["survivor_same_pid"] and g["single_group_replacement"] and g["params_equal"]
    ok = _le(g["survivor_resumed_s"], g.get("survivor_goal_s")) and same
    failed = g.get("failed_trials", 0)
    return row(
        "4 groups, Ray Train `TorchftConfig` with `replicate(hook, model, opt)`, SIGSTOP:"
        " survivors commit again",
        f"**{s(g['survivor_resumed_s'])}** (incident {s(g.get('incident_s'))}, culprit gone "
        f"{s(g.get('culprit_gone_s'))}); the replaced group steps "
        f"{s(g.get('replacement_stepping_s'))}",
        _range(g.get("survivors_resumed_s_range"))
        + (", same pids, one group replaced, params equal" if same else ""),
        f"{failed} of {g['trials']}", f"≤ {g.get('survivor_goal_s') or 0:g} s",
        yes(ok and not failed),
    )  # fmt: skip


def _startup(r: Result) -> str:
    g = r["summary"]
    n = g["trials"] + g["failed_trials"]
    return row(
        "Ray Train, a rank of the restarted group hangs before its first step: named",
        f"named **{s(g['named_s'])}** after the hang (`startup_straggler`, max "
        f"{s(g['named_s_max'])}); gone {s(g['gone_s'])} (killed after the start-up patience, "
        f"{g['startup_timeout_s']:g} s here); every rank steps again {s(g['all_stepping_s'])}",
        "–", f"{g['failed_trials']} of {n}",
        f"≤ {g['goal_s']:g} s (`init_straggler_s` {g['init_straggler_s']:g} s)",
        yes(_le(g["named_s_max"], g["goal_s"]) and not g["failed_trials"]),
    )  # fmt: skip


def replica_groups_section(
    launcher: Result | None, ray: Result | None, startup: Result | None
) -> Lines:
    """`launcher`: replicated_4groups.json; `ray`: torchft_ray_4groups.json; `startup`:
    ray_startup.json. Rows only for the results there."""
    if launcher is None and ray is None and startup is None:
        return []
    out = [
        "## Four replica groups, and a hang in a restarted group's start-up",
        "",
        "Four replica groups of one gloo rank; the third (rank 2, between two survivors in",
        "gloo's ring, the fourth next to neither) is SIGSTOPped at step 15 and the sidecar, on",
        "its shipped defaults, evicts it: under `trainprobe run` (examples/ddp_replicated.py)",
        "and under Ray Train (examples/ray_replicated.py, the same loop). Seconds from onset to",
        "each survivor's first step past the hung one: the median of each trial's slowest",
        "survivor, and the range over every survivor of every trial. Under Ray Train, rank 1 of",
        "the group restarted after a kill hangs after its hook, before its first step, while",
        "rank 0 waits in that step's allreduce (`watch_ddp`): seconds from that hang.",
        "",
        *head("case", "measured (median)", "every survivor", "failed", "goal", ""),
        *([_launcher(launcher)] if launcher else []),
        *([_ray(ray)] if ray else []),
        *([_startup(startup)] if startup else []),
        "",
        "```bash",
        *([command(launcher, "replicated_4groups")] if launcher else []),
        *([command(ray, "torchft_ray_4groups")] if ray else []),
        *([command(startup, "ray_startup")] if startup else []),
        "```",
        "",
    ]
    where = [
        f"{what} at load {min(ls):.1f} to {max(ls):.1f}"
        for what, ls in (
            ("`trainprobe run`", _loads(launcher, "faults")),
            ("Ray Train's groups", _loads(ray, "ray")),
            ("the start-up hang", _loads(startup, "")),
        )
        if ls
    ]
    return [
        *out,
        f"<sub>Measured on 2 CPUs, each trial's load average: {'; '.join(where)}.</sub>",
        "",
    ]
