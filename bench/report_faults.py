"""Markdown and plot for the fault matrix (bench/results/faults.json, issue 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from report_sections import provenance, s, table_head, yes

TOOLS = {
    "tp_watch": "trainprobe + watch_ddp",
    "tp": "trainprobe",
    "nvrx": "NVRx",
    "gloo": "gloo 5 s + torchrun",
}
CASES = {
    "sleep": "sleep forever in the step",
    "stop": "SIGSTOP",
    "lock": "deadlock on a lock",
    "gil": "C call holding the GIL",
    "kill9": "killed -9, peers block",
    "skip": "missing from a collective",
    "mismatch": "mismatched collectives",
    "stall8": "one rank stalls 8 s (read)",
    "stall30": "one rank stalls 30 s (sleep)",
    "stall60": "one rank stalls 60 s (read)",
    "eval": "undeclared 40 s eval, collectives",
    "ckpt_phase": "40 s checkpoint in a phase",
    "ckpt_out": "40 s checkpoint, no phase",
    "compile60": "60 s compile warm-up",
    "slow2x": "one rank 2x slower",
    "sidecar_frozen": "sidecar frozen 30 s",
}
DEFINITIVE = ("stop", "kill9", "mismatch")


def _groups(r: dict[str, Any], healthy: bool) -> list[dict[str, Any]]:
    order = {c: i for i, c in enumerate(CASES)}
    tools = {t: i for i, t in enumerate(TOOLS)}
    gs = [g for g in r["groups"].values() if g["healthy"] == healthy]
    return sorted(gs, key=lambda g: (order.get(g["case"], 99), g["ranks"], tools.get(g["tool"], 9)))


def _where(g: dict[str, Any]) -> str:
    """Trials whose naming incident also said where the culprit is stuck (none
    shown for results from before this count was kept)."""
    return f"{g['where']}/{g['n']}" if "where" in g else s(None)


def _definitive_done_s(t: dict[str, Any]) -> float:
    """When a definitive fault was dealt with: the culprit dead, or for a rank
    that died by itself (kill -9) its blocked peers dead too, and for a
    mismatch tie both ranks."""
    whole = t["case"] == "kill9" or t.get("tie")
    x = t.get("all_dead_s") if whole else t.get("culprit_dead_s")
    return 1e9 if x is None else x


def _definitive_ok(t: dict[str, Any]) -> bool:
    return _definitive_done_s(t) <= 5 and (t["culprit_right"] or bool(t.get("tie")))


def faults_goals(r: dict[str, Any]) -> list[str]:
    """Issue 12's goals, each with the measured figure (trainprobe rows only)."""
    tp = [t for t in r["trials"] if t["tool"] in ("tp", "tp_watch")]
    all_faults = [t for t in tp if not t["healthy"]]
    # A 2-rank mismatch is a tie: no tool can say which rank is wrong (fault_jobs.py).
    faults = [t for t in all_faults if not t.get("tie")]
    ties = [t for t in all_faults if t.get("tie")]
    named = sorted(t["named_s"] for t in faults if t.get("named_s") is not None)
    median = named[len(named) // 2] if named else None
    defin = [t for t in all_faults if t["case"] in DEFINITIVE]
    defin_ok = [t for t in defin if _definitive_ok(t)]
    killed = [t for t in all_faults if t.get("culprit_dead_s") is not None]
    late = [t for t in killed if t["culprit_dead_s"] > 120]
    healthy = [t for t in tp if t["healthy"]]
    false = sum(t["false_kill"] for t in healthy)
    right = sum(t["culprit_right"] for t in faults)
    pct = right / len(faults) if faults else 0.0
    tie_note = (
        f" ({len(ties)} 2-rank mismatch ties left out: named as a tie, both ranks ended)"
        if ties
        else ""
    )
    return [
        *table_head("goal (issue 12, shipped defaults, trainprobe)", "measured", "status"),
        f"| verdict naming the culprit ≤ 5 s after onset (median) | {s(median)} over "
        f"{len(named)} of {len(faults)} fault trials that got one{tie_note} | "
        f"{yes(median is not None and median <= 5 and len(named) == len(faults))} |",
        "| definitive faults killed ≤ 5 s, the culprit alone (stop, mismatch: the culprit "
        f"dead; kill -9: its blocked peers too) | "
        f"{len(defin_ok)} of {len(defin)} | {yes(len(defin_ok) == len(defin))} |",
        f"| every fault killed, within 120 s | {len(killed) - len(late)} of {len(all_faults)} | "
        f"{yes(len(killed) - len(late) == len(all_faults))} |",
        f"| 0 false kills in healthy cases | {false} in {len(healthy)} jobs | {yes(false == 0)} |",
        f"| culprit right in ≥ 95 % of fault trials | {right} of {len(faults)} "
        f"({pct:.0%}){tie_note} | {yes(pct >= 0.95)} |",
    ]


def faults_section(r: dict[str, Any]) -> list[str]:
    p = r["params"]
    out = [
        "## Fault matrix (issue 12)",
        "",
        provenance(r),
        "",
        f"{', '.join(str(x) for x in p['ranks'])}-rank gloo DDP jobs (`bench/fault_worker.py`), "
        "0.1 s steps; the event at a random step in 30..40 on a random rank (rank 0 for the",
        f"checkpoints); {p['trials']} trial(s) per case for trainprobe, "
        f"{p['baseline_trials']} for NVRx and torchrun, {p['parallel']} jobs at a time",
        "(`bench/bench_faults.py`). trainprobe runs under the shipped defaults: a sidecar",
        "started with no flags, `LivenessProbeHook()` with its 1 s interval, with and without",
        "`hook.watch_ddp(model)`. NVRx and torchrun as in the detection benchmark below.",
        "Onset = the faulty rank's log line just before the fault. *named* = the first",
        "trainprobe incident whose diagnosis names the culprit (and it alone); *right* = the",
        "culprit is the first rank to die and, for trainprobe, was named; *where named* = that",
        "incident also says where the culprit is stuck (its stacks). A fault job is cut",
        f"{p['cap_s']:g} s after onset (*not killed*). With 2 ranks a mismatch is a tie:",
        "its culprit (the rank that all-gathers while the other all-reduces) is a",
        "convention there, not something a tool could tell; trainprobe names it a tie and",
        "ends both ranks at once (*job dead*), and it is never counted *right*. A rank killed",
        "-9 dies by itself: what counts for it is the verdict and the end of its blocked",
        "peers (*job dead*).",
        "",
        "### Faults",
        "",
        *table_head(
            "fault",
            "ranks",
            "tool",
            "n",
            "onset → verdict (median)",
            "→ culprit named (median)",
            "→ culprit dead, median / max",
            "→ job dead (median)",
            "right",
            "where named",
            "not killed",
        ),
    ]
    for g in _groups(r, healthy=False):
        k = g["culprit_dead_s"]
        tp = g["tool"] in ("tp", "tp_watch")
        named = s(g["named_s"]["median"]) if tp else "n/a"
        where = _where(g) if tp else "n/a"
        out.append(
            f"| {CASES.get(g['case'], g['case'])} | {g['ranks']} | {TOOLS[g['tool']]} | {g['n']} | "
            f"{s(g['verdict_s']['median'])} | {named} | {s(k['median'])} / {s(k['max'])} | "
            f"{s(g['all_dead_s']['median'])} | {g['culprit_right']}/{g['n']} | {where} | "
            f"{g['not_killed']} |"
        )
    out += [
        "",
        "### Healthy cases (the job must finish)",
        "",
        *table_head("case", "ranks", "tool", "n", "false kills", "hang verdicts"),
    ]
    for g in _groups(r, healthy=True):
        out.append(
            f"| {CASES.get(g['case'], g['case'])} | {g['ranks']} | {TOOLS[g['tool']]} | {g['n']} | "
            f"{g['false_kills']} | {g['verdicts']} |"
        )
    out += [
        "",
        "A false kill is any rank gone before the job finished (for gloo, its collective",
        "timed out; the job dies all the same). A hang verdict without a kill is counted apart.",
        "",
        *faults_goals(r),
        "",
        "![fault matrix](perf/faults.png)",
        "",
    ]
    return out


def faults_plot(res: dict[str, Any], out: Path) -> None:
    """Onset → culprit dead per fault and tool (dots: trials; x: not killed), and the
    share of healthy jobs killed per case and tool."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = res["trials"]
    cap = res["params"]["cap_s"]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 8.5))
    faults = [c for c in CASES if any(t["case"] == c and not t["healthy"] for t in trials)]
    healthy = [c for c in CASES if any(t["case"] == c and t["healthy"] for t in trials)]
    tools = [t for t in TOOLS if any(x["tool"] == t for x in trials)]
    width = 0.8 / max(1, len(tools))
    for j, tool in enumerate(tools):
        xs, ys, xn, yn = [], [], [], []
        for i, case in enumerate(faults):
            for t in trials:
                if t["tool"] == tool and t["case"] == case and not t["healthy"]:
                    x = i + (j - (len(tools) - 1) / 2) * width
                    if t.get("culprit_dead_s") is None:
                        xn.append(x)
                        yn.append(cap)
                    else:
                        xs.append(x)
                        ys.append(max(t["culprit_dead_s"], 0.01))
        dots = ax.scatter(xs, ys, s=14, label=TOOLS[tool], zorder=3)
        ax.scatter(xn, yn, s=30, marker="x", color=dots.get_facecolor()[0], zorder=3)
        share = []
        for case in healthy:
            ts = [t for t in trials if t["tool"] == tool and t["case"] == case]
            share.append(sum(t["false_kill"] for t in ts) / len(ts) if ts else 0)
        pos = [i + (j - (len(tools) - 1) / 2) * width for i in range(len(healthy))]
        bx.bar(pos, share, width, label=TOOLS[tool])
    ax.axhline(5.0, color="red", lw=0.8, ls="--")
    ax.axhline(120.0, color="orange", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(faults)), [CASES[c] for c in faults], fontsize=7, rotation=15)
    ax.set_ylabel("onset → culprit dead (s)")
    ax.set_title("Faults (red: 5 s, orange: 120 s; x: not killed by the cap)")
    ax.legend(fontsize=7, ncol=len(tools))
    ax.grid(axis="y", alpha=0.3)
    bx.set_xticks(range(len(healthy)), [CASES[c] for c in healthy], fontsize=7, rotation=15)
    bx.set_ylabel("share of jobs killed")
    bx.set_ylim(0, 1.05)
    bx.set_title("Healthy cases: false kills (goal: none)")
    bx.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
