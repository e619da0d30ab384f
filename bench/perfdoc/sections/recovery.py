"""Recovery without restarting healthy ranks: replicated jobs (torchft), side by side with
torchft alone and the non-replicated Ray Train and torchrun restarts."""

from __future__ import annotations

from ..core import CASES, Lines, Result, command, head, missing, plot_ref, row, s, yes
from .ray_recovery import ray_survivor_command, ray_survivor_rows, ray_survivor_where

RECOVERY_CMD = "python bench/bench_torchft.py --trials 3"
FAULT_ORDER = ("sleep", "lock", "gil", "stop", "kill9")
HEALTHY = {
    "stall8": "one replica stalls 8 s, then goes on",
    "checkpoint": "a declared 15 s checkpoint on one replica",
    "eval": "a 5 s eval on every replica, every 25 steps",
}
ORCHESTRATORS = {
    "ray_train": "Ray Train (DDP, FailureConfig)",
    "torchrun": "torchrun --max-restarts",
}


def _ok(x: float | None, goal: float) -> bool:
    return x is not None and x <= goal


def _alone(g: Result | None, limit_s: float) -> str:
    if g is None:
        return "–"
    x = g["survivor_resumed_s"]
    return s(x) if x is not None else f"not within {limit_s:g} s"


def recovery_goals(r: Result) -> list[tuple[str, str, str, str, bool]]:
    """(name, goal, measured, anchor, met) for the headline table."""
    sm, lim = r["summary"], r["settings"]["limit_s"]
    f, hs = sm["faults"], sm["healthy"].values()
    worst = {}
    for kind, faults in (
        ("ambiguous", ("sleep", "lock", "gil")),
        ("definitive", ("stop", "kill9")),
    ):
        got = [f[f"{x}/trainprobe"] for x in faults if f"{x}/trainprobe" in f]
        worst[kind] = max((g["survivor_resumed_s"] or float("inf") for g in got), default=None)
    same = all(g["survivor_same_pid"] for k, g in f.items() if k.endswith("/trainprobe"))
    ev, n = sum(h["evictions"] for h in hs), sum(h["trials"] for h in hs)
    waiting = sum(g["waiting_replica_kills"] for g in f.values())
    waiting += sum(h["waiting_replica_kills"] for h in hs)
    ok = _ok(worst["ambiguous"], 15.0) and _ok(worst["definitive"], 5.0) and same
    out = [
        (
            "replicated: survivors commit again",
            "≤ 15 s ambiguous, ≤ 5 s definitive, same pid; 0 evictions of healthy jobs",
            f"worst medians {s(worst['ambiguous'])}, {s(worst['definitive'])}; {ev} of {n}",
            f"torchft alone, sleep: {_alone(f.get('sleep/alone'), lim)}",
            ok and n > 0 and ev == 0 and waiting == 0,
        )
    ]
    if ray := sm["ray"].get("sleep"):
        ddp = sm["restart"].get("ray_train")
        out.append(
            (
                "Ray Train replacement steps",
                "≤ 20 s, equal parameters",
                f"median {s(ray['replacement_stepping_s'])}",
                f"no replicas: all ranks {s(ddp['all_stepping_s'])}" if ddp else "–",
                _ok(ray["replacement_stepping_s"], 20.0)
                and ray["params_equal"]
                and ray["single_group_replacement"],
            )
        )
    return out


def recovery_section(
    r: Result | None,
    loaded: Result | None = None,
    ray_result: Result | None = None,
    ray_before: Result | None = None,
) -> Lines:
    out = ["## Recovery without restarting healthy ranks (torchft replicas)", ""]
    if r is None:
        return out + missing("torchft", RECOVERY_CMD)
    sm, st = r["summary"], r["settings"]
    f, lim = sm["faults"], st["limit_s"]
    out += [
        "Two torchft replica groups (real Manager, ProcessGroupGloo, lighthouse with "
        f"`--heartbeat_timeout_ms {st['heartbeat_timeout_ms']}`), each under its own `torchrun "
        "--max-restarts` (docs/DEPLOY.md); replica `train_1` faults while `train_0` waits for it;"
        " trainprobe: the sidecar's shipped defaults (replicated patience 10 s). Seconds from "
        f"onset, medians of {st['trials']} trials; the survivor keeps its pid in every row.",
        "",
        *head("case", "trainprobe", "without trainprobe", "goal", ""),
    ]
    restart = sm["restart"]
    tr = restart.get("torchrun")
    groups = [
        ([x for x in ("sleep", "lock", "gil") if f"{x}/trainprobe" in f], "sleep / deadlock / GIL"),
        *(([x], CASES[x]) for x in ("stop", "kill9") if f"{x}/trainprobe" in f),
    ]
    for faults, label in groups:
        if not faults:
            continue
        gs = [f[f"{x}/trainprobe"] for x in faults]
        alone = [_alone(f.get(f"{x}/alone"), lim) for x in faults]
        alone_txt = alone[0] if len(set(alone)) == 1 else " / ".join(alone)
        if faults[0] == "sleep" and tr:
            alone_txt += f"; no replicas (torchrun, sleep): all ranks {s(tr['all_stepping_s'])}"
        ok = all(_ok(g["survivor_resumed_s"], g["goal_s"]) and g["survivor_same_pid"] for g in gs)
        out.append(
            row(
                f"{label}: survivor commits again",
                "**" + " / ".join(s(g["survivor_resumed_s"]) for g in gs) + "** (culprit gone "
                + " / ".join(s(g["culprit_gone_s"]) for g in gs) + ", replaced "
                + " / ".join(s(g["replacement_stepping_s"]) for g in gs) + ")",
                f"torchft alone: {alone_txt}", f"≤ {gs[0]['goal_s']:g} s", yes(ok),
            )
        )  # fmt: skip
    if ray := sm["ray"].get("sleep"):
        ok = _ok(ray["replacement_stepping_s"], 20.0) and ray["params_equal"]
        ok = ok and ray["single_group_replacement"]
        ddp = restart.get("ray_train")
        out.append(
            row(
                "Ray Train `TorchftConfig`, sleep: replacement steps",
                f"**{s(ray['replacement_stepping_s'])}** (gone {s(ray['culprit_gone_s'])}, in "
                f"`train_func` {s(ray['replacement_begin_s'])}); params equal, one group",
                f"no replicas, all ranks step again: {s(ddp['all_stepping_s']) if ddp else '–'}",
                "≤ 20 s", yes(ok),
            )
        )  # fmt: skip
    out += ray_survivor_rows(ray_result, ray_before)
    hs = sm["healthy"]
    ev, n = sum(h["evictions"] for h in hs.values()), sum(h["trials"] for h in hs.values())
    waiting = sum(g["waiting_replica_kills"] for g in f.values())
    waiting += sum(h["waiting_replica_kills"] for h in hs.values())
    stall = hs.get("stall8", {}).get("stall_s")
    out.append(
        row(
            "healthy: 8 s stall, checkpoint, eval on every replica: evictions",
            f"**{ev} of {n}** (the 8 s stall lasts {s(stall)}); waiting replicas killed: {waiting}",
            "–", "0", yes(n > 0 and ev == 0 and waiting == 0),
        )
    )  # fmt: skip
    if loaded is not None:
        lf, lh = loaded["summary"]["faults"], loaded["summary"]["healthy"]
        loads = [t["load"] for ts in loaded["trials"].values() for t in ts if "load" in t]
        got = [(k.split("/")[0], g) for k, g in lf.items() if k.endswith("/trainprobe")]
        ok = all(_ok(g["survivor_resumed_s"], g["goal_s"]) for _, g in got)
        ok = ok and all(h["evictions"] == 0 for h in lh.values())
        out.append(
            row(
                f"loaded (`--burn {loaded['settings']['burn']}`, load {min(loads):.0f}–"
                f"{max(loads):.0f}): the same",
                ", ".join(f"{k} **{s(g['survivor_resumed_s'])}**" for k, g in got)
                + "; 8 s stall: "
                + ", ".join(f"{h['evictions']} of {h['trials']} evicted" for h in lh.values()),
                "–", "as above", yes(ok),
            )
        )  # fmt: skip
    out += [
        "",
        plot_ref("torchft", "replicated recovery"),
        "",
        "```bash",
        command(r, "torchft"),
        *([command(loaded, "torchft_loaded")] if loaded is not None else []),
        *ray_survivor_command(ray_result),
        "```",
        "",
        f"<sub>Measured on {_where(r)['device']}"
        f"{ray_survivor_where(ray_result, ray_before)}.</sub>",
        "",
    ]
    return out


def _where(r: Result) -> Result:
    lb, la = r.get("load_before") or ["?"], r.get("load_after") or ["?"]
    burn = r["settings"].get("burn") or 0
    extra = f", {burn} busy-loop processes alongside" if burn else ""
    return {
        **r,
        "device": f"{r.get('cpus')} CPUs{extra}, load average {lb[0]} at the start and {la[0]}"
        f" at the end ({r.get('wall_s', 0) / 60:.0f} min)",
    }
