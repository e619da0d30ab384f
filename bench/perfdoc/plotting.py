"""What every plot of docs/PERFORMANCE.md is drawn with: matplotlib without a
display, one panel's labels, a plain bar chart, and a maker from a drawing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["Results", "bars", "finish", "one", "plt", "save"]

Results = dict[str, Any]


def save(fig: Any, out: Path) -> None:
    fig.tight_layout()
    # No software version or date in the file: re-rendering the same results
    # gives the same bytes on the same matplotlib.
    fig.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(fig)


def finish(
    fig: Any, ax: Any, out: Path, ylabel: str, title: str, legend: bool = True, grid: str = "y"
) -> None:
    """Label one panel, grid its `grid` axis ("both" for both), and save the figure."""
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8)
    ax.grid(axis=grid, alpha=0.3)
    save(fig, out)


def bars(
    out: Path,
    title: str,
    ylabel: str,
    labels: list[str],
    values: list[float],
    goal: float | None = None,
    goal_label: str = "goal",
) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.bar(range(len(values)), values, color="#4477aa")
    for i, v in enumerate(values):
        ax.annotate(f"{v:.3g}", (i, v), ha="center", va="bottom", fontsize=8)
    if goal is not None:
        ax.axhline(goal, color="red", lw=0.8, ls="--", label=goal_label)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    finish(fig, ax, out, ylabel, title, legend=goal is not None)


def one(name: str, draw: Callable[[Any, Path], None]) -> Callable[[Results, Path], bool]:
    def make(res: Results, out: Path) -> bool:
        if res[name] is None:
            return False
        draw(res[name], out)
        return True

    return make
