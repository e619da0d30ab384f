"""The restart section's plot (matplotlib), beside figures.py's: how soon training steps
again after a kill, per stack and hang, the kill's share and each goal marked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .plotting import finish, plt
from .sections.restart import (
    DEFINITIVE_GOAL_S,
    HANGS,
    SHORT,
    ray_restart,
    ray_sleep,
    restart_goal,
    stack_results,
)

__all__ = ["MAKERS", "restart_plot"]

Results = dict[str, Any]


def _bars(res: Results, hang: str) -> list[Any]:
    """(label, killed s or None, steps again s, goal s) for one hang's panel."""
    out: list[Any] = []
    r, rep, ft = res.get("restart"), res.get("replicated"), res.get("torchft")
    for run, where in ((r, "torchrun"), (res.get("restart_quiet"), "quiet")):
        for k, g in stack_results(run, hang) if run is not None else ():
            x = g["summary"]
            out.append((f"{SHORT[k]}\n{where}", x["killed_s_median"],
                        x["stepping_again_s_median"], restart_goal(run, hang)))  # fmt: skip
    if r is not None and hang == "sleep" and (ray := ray_sleep(ft, res.get("ray_restart"))[0]):
        out.append(("plain\nRay Train", ray.get("killed_s"), ray["all_stepping_s"],
                    restart_goal(r, hang)))  # fmt: skip
    if hang == "stop" and (ray := ray_restart(res.get("ray_restart"), hang)):
        out.append(("plain\nRay Train", ray["killed_s"], ray["all_stepping_s"],
                    DEFINITIVE_GOAL_S["ray_train"]))  # fmt: skip
    if rep is not None and (x := rep["summary"]["faults"].get(hang)):
        out.append(("replicated\nsurvivor", None, x["survivor_resumed_s"], x["goal_survivor_s"]))
        out.append(("replicated\nevicted", None, x["evicted_stepping_s"], x["goal_evicted_s"]))
    return [b for b in out if b[2] is not None]  # a figure a failed run left out: no bar


def restart_plot(res: Results, out: Path) -> bool:
    panels = [(h, b) for h in HANGS if (b := _bars(res, h))]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 3.8), squeeze=False)
    for ax, (hang, bars) in zip(axes[0], panels, strict=True):
        xs = range(len(bars))
        ax.bar(xs, [b[2] for b in bars], color="#4477aa", label="training steps again")
        ax.bar(xs, [b[1] or 0 for b in bars], color="#ee7733", label="hung rank killed")
        for i, (_, _, v, goal) in enumerate(bars):
            ax.annotate(f"{v:.3g}", (i, v), ha="center", va="bottom", fontsize=7)
            ax.hlines(goal, i - 0.45, i + 0.45, color="red", lw=0.8, ls="--",
                      label="goal" * (i == 0))  # fmt: skip
        ax.set_xticks(list(xs), [b[0] for b in bars], fontsize=7)
        ax.set_ylabel("seconds after onset (median)")
        ax.set_title(HANGS[hang])
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Training steps again after the kill")
    # One legend, on the last panel, right of its middle: below the restarts' tall bars and
    # above the replicas' short ones.
    axes[0][-1].legend(fontsize=7, loc="center right")
    finish(fig, axes[0][-1], out, "seconds after onset (median)", HANGS[panels[-1][0]], False)
    return True


MAKERS: dict[str, Callable[[Results, Path], bool]] = {"restart": restart_plot}
