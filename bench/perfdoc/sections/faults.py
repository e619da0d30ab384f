"""The fault matrix: real faults and healthy stalls under the shipped defaults."""

from __future__ import annotations

from ..core import CASES, DEFINITIVE, TOOLS, Lines, Result, closing, head, missing, row, s, yes


def _fault_groups(r: Result, healthy: bool) -> list[Result]:
    order, tools = {c: i for i, c in enumerate(CASES)}, {t: i for i, t in enumerate(TOOLS)}
    gs = [g for g in r["groups"].values() if g["healthy"] == healthy]
    return sorted(gs, key=lambda g: (order.get(g["case"], 99), g["ranks"], tools.get(g["tool"], 9)))


def _definitive_ok(t: Result) -> bool:
    whole = t["case"] == "kill9" or t.get("tie")
    x = t.get("all_dead_s") if whole else t.get("culprit_dead_s")
    return x is not None and x <= 5 and (t["culprit_right"] or bool(t.get("tie")))


def fault_goals(r: Result) -> list[tuple[str, str, bool]]:
    """(goal, measured, met) over trainprobe's trials at the shipped defaults."""
    tp = [t for t in r["trials"] if t["tool"] in ("tp", "tp_watch")]
    all_faults = [t for t in tp if not t["healthy"]]
    # A 2-rank mismatch is a tie: no tool can say which rank is wrong.
    faults = [t for t in all_faults if not t.get("tie")]
    ties = len(all_faults) - len(faults)
    named = sorted(t["named_s"] for t in faults if t.get("named_s") is not None)
    median = named[len(named) // 2] if named else None
    defin = [t for t in all_faults if t["case"] in DEFINITIVE]
    ok = sum(_definitive_ok(t) for t in defin)
    killed = sum(
        t.get("culprit_dead_s") is not None and t["culprit_dead_s"] <= 120 for t in all_faults
    )
    healthy = [t for t in tp if t["healthy"]]
    false = sum(t["false_kill"] for t in healthy)
    right = sum(t["culprit_right"] for t in faults)
    pct = right / len(faults) if faults else 0.0
    tie = f" ({ties} 2-rank mismatch ties apart)" if ties else ""
    return [
        (
            "culprit named ≤ 5 s after onset (median)",
            f"{s(median)} ({len(named)} of {len(faults)} trials named it){tie}",
            median is not None and median <= 5 and len(named) == len(faults),
        ),
        (
            "definitive faults (stop, kill -9, mismatch) ended ≤ 5 s",
            f"{ok} of {len(defin)}",
            ok == len(defin),
        ),
        (
            "every fault's culprit killed within 120 s",
            f"{killed} of {len(all_faults)}",
            killed == len(all_faults),
        ),
        ("0 false kills in healthy jobs", f"{false} in {len(healthy)} jobs", false == 0),
        (
            "culprit right in ≥ 95 % of fault trials",
            f"{right} of {len(faults)} ({pct:.0%}){tie}",
            pct >= 0.95,
        ),
    ]


def faults_section(r: Result | None) -> Lines:
    out = ["## Fault matrix: real faults, healthy stalls, shipped defaults", ""]
    if r is None:
        return out + missing("faults")
    p = r["params"]
    out += [
        f"{', '.join(str(x) for x in p['ranks'])}-rank gloo DDP jobs, 0.1 s steps; the event at a",
        "random step in 30..40 on a random rank. trainprobe as shipped: a sidecar with no flags,",
        "`LivenessProbeHook()`, with and without `hook.watch_ddp(model)`; NVRx and torchrun as",
        "above. *Named*: the first incident naming the culprit alone; *right*: the culprit died",
        "first (and was named); *where*: the incident said where it is stuck. Ambiguous evidence",
        "(a sleeping, locked or GIL-holding rank) is killed after `hang_patience_s` (auto, ≥ "
        "90 s);",
        "definitive evidence at once. A 2-rank mismatch is a tie: both ranks end, never *right*.",
        f"Jobs are cut {p['cap_s']:g} s after onset (*not killed*).",
        "",
        *head(
            "fault",
            "ranks",
            "tool",
            "n",
            "→ verdict",
            "→ named",
            "→ culprit dead, median / max",
            "→ job dead",
            "right",
            "where",
            "not killed",
        ),
    ]
    for g in _fault_groups(r, healthy=False):
        k, tp = g["culprit_dead_s"], g["tool"] in ("tp", "tp_watch")
        named = s(g["named_s"]["median"]) if tp else "n/a"
        where = (f"{g['where']}/{g['n']}" if "where" in g else "–") if tp else "n/a"
        tool = "gloo 5 s + torchrun" if g["tool"] == "gloo" else TOOLS[g["tool"]]
        out.append(
            row(
                CASES.get(g["case"], g["case"]),
                g["ranks"],
                tool,
                g["n"],
                s(g["verdict_s"]["median"]),
                named,
                f"{s(k['median'])} / {s(k['max'])}",
                s(g["all_dead_s"]["median"]),
                f"{g['culprit_right']}/{g['n']}",
                where,
                g["not_killed"],
            )
        )
    cols = sorted(
        {(g["tool"], g["ranks"]) for g in _fault_groups(r, healthy=True)},
        key=lambda c: (list(TOOLS).index(c[0]), c[1]),
    )
    out += [
        "",
        "Healthy jobs, which must finish: jobs killed of jobs run (hang verdicts given, no kill).",
        "",
        *head("healthy case", *(f"{TOOLS[t].split(' timeout')[0]}, {n} ranks" for t, n in cols)),
    ]
    cells: dict[str, dict[tuple[str, int], str]] = {}
    for g in _fault_groups(r, healthy=True):
        cells.setdefault(g["case"], {})[(g["tool"], g["ranks"])] = (
            f"{g['false_kills']}/{g['n']} ({g['verdicts']})"
        )
    for case, by in cells.items():
        out.append(row(CASES.get(case, case), *(by.get(c, "–") for c in cols)))
    out += ["", *head("goal (trainprobe, shipped defaults)", "measured", "")]
    out += [row(goal, got, yes(ok)) for goal, got, ok in fault_goals(r)]
    return [*out, "", *closing(r, "faults", "fault matrix")]
