"""The plots of docs/PERFORMANCE.md (matplotlib, no display needed), for :func:`document.plots`.

Each maker takes every result (None where a file is missing) and the PNG to
write, and says whether it wrote it; the drawing primitives they share are in
:mod:`.plotting`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .core import CASES, TOOLS
from .plotting import Results, bars, finish, one, plt, save
from .sections.scale import job_scale

__all__ = ["MAKERS"]

TOOL_LABELS = {
    "tp_explicit": "trainprobe\nexplicit",
    "tp_auto": "trainprobe\nauto",
    "tp_default": "trainprobe\ndefaults",
    "nvrx": "NVRx\ncalculated",
    "gloo": "gloo timeout\n+ torchrun",
}


COST_LABELS = {
    "trainprobe": "trainprobe\non_step_end",
    "nvrx": "NVRx\nsend_heartbeat",
    "elastic": "torchelastic\nexpires()",
    "elastic_scoped": "torchelastic\nexpires(scope=)",
}


def cost_plot(res: dict[str, Any], out: Path) -> None:
    """Median net cost per call (bars) and p99 (markers), log scale, both regimes."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    names = list(COST_LABELS)
    width = 0.38
    for j, (mode, color) in enumerate((("back_to_back", "#4477aa"), ("paced", "#ee7733"))):
        m = res["modes"][mode]
        xs = [i + (j - 0.5) * width for i in range(len(names))]
        med = [max(m[n]["net_ns"]["median"], 1.0) / 1000 for n in names]
        p99 = [max(m[n]["net_ns"]["p99"], 1.0) / 1000 for n in names]
        ax.bar(xs, med, width, color=color, label=f"{mode.replace('_', '-')}: median")
        ax.scatter(xs, p99, color="black", marker="_", s=200, zorder=3)
    ax.scatter([], [], color="black", marker="_", label="p99")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), [COST_LABELS[n] for n in names])
    finish(
        fig, ax, out, "µs per call (minus an empty call)", "Cost on the training thread, per step"
    )


def detection_plot(res: dict[str, Any], out: Path) -> None:
    """Onset → culprit killed, every trial, one panel per kind of hang."""
    kinds = res["params"]["kinds"]
    tools = [t for t in TOOL_LABELS if any(r["tool"] == t for r in res["trials"])]
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 4.4), sharey=True)
    axes = list(axes) if len(kinds) > 1 else [axes]
    for ax, kind in zip(axes, kinds, strict=True):
        data = []
        for tool in tools:
            xs = [
                r["culprit_dead_s"]
                for r in res["trials"]
                if r["tool"] == tool and r["kind"] == kind and r["culprit_dead_s"] is not None
            ]
            data.append(xs)
        pos = list(range(len(tools)))
        ax.boxplot([d or [float("nan")] for d in data], positions=pos, widths=0.6, showfliers=False)
        for i, d in enumerate(data):
            jitter = [i + ((k % 7) - 3) * 0.05 for k in range(len(d))]
            ax.scatter(jitter, d, s=10, alpha=0.6, zorder=3)
        ax.axhline(5.0, color="red", lw=0.8, ls="--")
        ax.set_xticks(pos, [TOOL_LABELS[t] for t in tools], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(f"hang: {kind}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("seconds from onset to the hung rank's death")
    fig.suptitle("Detection and kill latency (red: the 5 s goal)")
    save(fig, out)


def scale_plot(res: dict[str, Any], out: Path, tele: dict[str, Any] | None = None) -> None:
    """Reports/s, p99 lag, CPU and memory of one sidecar against N workers."""
    rows = res["levels"]
    n = [r["workers"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    if tele is not None:
        tn = [r["workers"] for r in tele["levels"]]
        axes[0].plot(tn, [r["processed_per_s"] for r in tele["levels"]], "^-", color="purple")
        axes[0].plot([], [], "^-", color="purple", label="processed, telemetry on")
        axes[1].plot(
            tn,
            [min(r["lag_p99_s"], 10) * 1000 for r in tele["levels"]],
            "^-",
            color="purple",
            label="p99, telemetry on",
        )
    ax = axes[0]
    ax.plot(n, [r["sent_per_s"] for r in rows], "o--", label="sent by the generators")
    ax.plot(n, [r["processed_per_s"] for r in rows], "o-", label="processed by the sidecar")
    ax.axhline(res["goal_per_s"], color="red", lw=0.8, ls="--", label="goal")
    ax.set_xlabel("simulated workers (N)")
    ax.set_ylabel("reports/s")
    ax2 = ax.twinx()
    ax2.plot(n, [r["sidecar_cpu"] * 100 for r in rows], "s:", color="gray")
    ax2.set_ylabel("sidecar CPU, % of one core (gray)")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("Throughput")
    ax = axes[1]
    ax.plot(n, [r["lag_p50_s"] * 1000 for r in rows], "o-", label="p50")
    ax.plot(n, [min(r["lag_p99_s"], 10) * 1000 for r in rows], "o-", label="p99")
    ax.axhline(200, color="red", lw=0.8, ls="--", label="p99 goal")
    ax.set_yscale("log")
    ax.set_xlabel("simulated workers (N)")
    ax.set_ylabel("report → verdict lag, ms")
    ax.legend(fontsize=7)
    ax.set_title("Lag (tick every 100 ms)")
    ax = axes[2]
    ax.plot(n, [r["rss_bytes"] / 2**20 for r in rows], "o-", label="RSS, MiB")
    ax.set_xlabel("simulated workers (N)")
    ax.set_ylabel("sidecar RSS, MiB")
    ax3 = ax.twinx()
    ax3.plot(n, [r["bytes_per_worker"] / 1024 for r in rows], "s:", color="gray")
    ax3.set_ylabel("KiB per worker (gray)")
    ax.set_title("Memory")
    save(fig, out)


def hook_memory_plot(res: dict[str, Any], out: Path) -> None:
    """RSS of the training process against steps."""
    series = res["rss_series"]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot([s["step"] for s in series], [s["rss_bytes"] / 2**20 for s in series], "o-")
    ax.set_xlabel("steps (on_step_end calls)")
    title = "Training process with the hook, reporter at 10 Hz"
    finish(fig, ax, out, "RSS, MiB", title, legend=False, grid="both")


def faults_plot(res: dict[str, Any], out: Path) -> None:
    """Onset → culprit dead per fault and tool (dots: trials; x: not killed), and the
    share of healthy jobs killed per case and tool."""
    trials = res["trials"]
    cap = res["params"]["cap_s"]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 8.5))
    faults = [c for c in CASES if any(t["case"] == c and not t["healthy"] for t in trials)]
    healthy = [c for c in CASES if any(t["case"] == c and t["healthy"] for t in trials)]
    tools = [t for t in ("tp_watch", "tp", "nvrx", "gloo") if any(x["tool"] == t for x in trials)]
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
    save(fig, out)


def job_scale_plot(res: Results, out: Path) -> bool:
    runs = job_scale(res)
    if not runs["on"] or not runs["off"]:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for j, (t, color) in enumerate((("on", "#ee7733"), ("off", "#4477aa"))):
        xs = [i + (j - 0.5) * 0.38 for i in range(len(runs[t]))]
        ax.bar(xs, runs[t], 0.38, color=color, label=f"telemetry {t}")
        ax.axhline(statistics.median(runs[t]), color=color, lw=0.8, ls=":")
    ax.axhline(50.0, color="red", lw=0.8, ls="--", label="goal: 20,000 a CPU-second")
    ax.set_xticks(range(len(runs["on"])), [f"pair {i + 1}" for i in range(len(runs["on"]))])
    title = "1,000 relayed ranks, shipped defaults (dotted: medians)"
    finish(fig, ax, out, "sidecar CPU µs per report", title)
    return True


def fuzz_plot(res: Results, out: Path) -> bool:
    fz = res["fuzz_soak"]
    if fz is None:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.plot([x["cases"] for x in fz["samples"]], [x["rss_mb"] for x in fz["samples"]], "-")
    ax.axhline(150, color="red", lw=0.8, ls="--", label="goal: < 150 MB")
    ax.set_xlabel("hostile streams so far")
    finish(fig, ax, out, "sidecar RSS, MB", "Sidecar memory under hostile streams", grid="both")
    return True


def _scale(res: Results, out: Path) -> bool:
    if res["scale"] is None:
        return False
    scale_plot(res["scale"], out, res["scale_telemetry"])
    return True


def torchft_plot(r: Any, out: Path) -> None:
    """Survivor back to committing, per fault: trainprobe beside torchft alone."""
    f = r["summary"]["faults"]
    faults = [x for x in ("sleep", "lock", "gil", "stop", "kill9") if f"{x}/trainprobe" in f]
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for k, (mode, color) in enumerate((("trainprobe", "#4477aa"), ("alone", "#bbbbbb"))):
        vals = [(f.get(f"{x}/{mode}") or {}).get("survivor_resumed_s") or 0 for x in faults]
        xs = [i + (k - 0.5) * 0.38 for i in range(len(faults))]
        ax.bar(xs, vals, 0.38, color=color, label="torchft alone" if k else mode)
    for i, x in enumerate(faults):  # each fault's goal over its own bars
        goal = f[f"{x}/trainprobe"]["goal_s"]
        ax.hlines(goal, i - 0.45, i + 0.45, color="red", lw=0.8, ls="--", label="goal" * (i == 0))
    ax.set_xticks(range(len(faults)), [CASES.get(x, x) for x in faults], fontsize=7)
    finish(fig, ax, out, "seconds after onset", "Survivor commits a step again (median)")


MAKERS: dict[str, Callable[[Results, Path], bool]] = {
    "cost": one("cost", cost_plot),
    "detection": one("detection", detection_plot),
    "faults": one("faults", faults_plot),
    "torchft": one("torchft", torchft_plot),
    "scale": _scale,
    "hook_memory": one("hook_memory", hook_memory_plot),
    "job_scale": job_scale_plot,
    "fuzz_soak": fuzz_plot,
    "sync_gpu": one(
        "sync_gpu",
        lambda r, out: bars(
            out,
            f"DDP step on 1× {r['device']}",
            "median step, ms",
            ["plain", "watched"],
            [r["median_step_s"]["plain"] * 1000, r["median_step_s"]["watched"] * 1000],
        ),
    ),
    "health": one(
        "health",
        lambda r, out: bars(
            out,
            "Kill decision → probe sees NOT_SERVING",
            "seconds",
            [f"trial {i + 1}" for i in range(len(r["rows"]))],
            [x["latency_s"] for x in r["rows"]],
            1.0,
            "goal: 1 s",
        ),
    ),
    "ray_watch": one(
        "ray_watch",
        lambda r, out: bars(
            out,
            f"Ray watcher, {r['actors']} actors",
            "% of a core",
            ["watcher", "watching process", "Ray's services"],
            [r["watcher_core_pct"], r["driver_core_pct"], r["ray_services_core_pct"]],
            r["goal_core_pct"],
            "goal (watcher)",
        ),
    ),
    "install": one(
        "install",
        lambda r, out: bars(
            out,
            "Install size, net of an empty venv",
            "MiB",
            [n.split(" (")[0] for n in r["sizes"]],
            [x["net_of_empty_venv_mib"] for x in r["sizes"].values()],
            100e6 / 2**20,
            "goal: sidecar-only ≤ 100 MB",
        ),
    ),
}
