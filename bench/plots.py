"""PNG plots of the benchmark results (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

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
    ax.set_ylabel("µs per call (minus an empty call)")
    ax.set_title("Cost on the training thread, per step")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def hook_memory_plot(res: dict[str, Any], out: Path) -> None:
    """RSS of the training process against steps."""
    series = res["rss_series"]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot([s["step"] for s in series], [s["rss_bytes"] / 2**20 for s in series], "o-")
    ax.set_xlabel("steps (on_step_end calls)")
    ax.set_ylabel("RSS, MiB")
    ax.set_title("Training process with the hook, reporter at 10 Hz")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
