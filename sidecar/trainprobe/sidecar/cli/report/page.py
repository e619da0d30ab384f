"""The page of ``trainprobe report``: plots (matplotlib) and self-contained HTML.

Plain functions over plain data: per-rank windows sampled from the sidecar's
status (as ``trainprobe top`` keeps them) and the job's incident stories.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from trainprobe.sidecar.cli.incidents.story import IncidentStory, culprit_line, summary_line
from trainprobe.sidecar.cli.incidents.timeline import timeline
from trainprobe.sidecar.cli.report.story import events, main_story, what_happened
from trainprobe.sidecar.core.text import printable

__all__ = ["ReportData", "render_pngs", "write_report"]


@dataclass
class ReportData:
    """What one report shows."""

    job_id: str
    #: Wall time of each sampled window.
    times: list[float] = field(default_factory=list)
    #: rank -> one (step_s, lag_s) per window, None where unknown.
    cells: dict[int, list[tuple[float | None, float | None]]] = field(default_factory=dict)
    stories: list[IncidentStory] = field(default_factory=list)
    #: The live diagnosis at the end of sampling (the Diagnose RPC's JSON), if any.
    diagnosis: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The job's step in each sampled window (its furthest running rank's), None
    #: where no rank of it ran: where training resumed after an action.
    steps: list[int | None] = field(default_factory=list)

    def culprit(self) -> tuple[list[int], dict[str, str]]:
        """The culprits and where they are stuck: the live diagnosis's, else the
        latest hang's (a DEGRADED finding never outranks it); a place the live
        analysis lacks (no stacks read now) comes from it."""
        culprits: list[int] = []
        where: dict[str, str] = {}
        story = main_story(self.stories)
        if story is not None and (j := story.to_json())["culprits"]:
            culprits, where = list(j["culprits"]), dict(j["where"])
        if self.diagnosis.get("culprits"):
            culprits = [int(r) for r in self.diagnosis["culprits"]]
            where = {**where, **(self.diagnosis.get("where") or {})}
        return culprits, where


#: Events the timeline draws (the latest): each takes a row of the figure.
MAX_TIMELINE_EVENTS = 200


def render_pngs(data: ReportData, out: Path) -> dict[str, Path]:
    """Write the heatmap and timeline PNGs; returns them by name."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file, never a window
    # A rule, id or place from the log is drawn as text: "$...$" in it is not
    # parsed as maths (a bad macro raised), nor anything handed to TeX.
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        return _draw(data, out)


def _draw(data: ReportData, out: Path) -> dict[str, Path]:
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FuncFormatter, NullFormatter

    culprits = set(data.culprit()[0])

    written: dict[str, Path] = {}
    ranks = sorted(data.cells)
    marks = events(data.stories, data.times, data.steps)[-MAX_TIMELINE_EVENTS:]
    # A job that ran no step while sampled (it had finished) has no heatmap.
    ran = any(v is not None for col in data.cells.values() for cell in col for v in cell)
    if ranks and data.times and not ran:
        data.notes.append("no rank of this job ran while sampled (it had ended): no heatmap")
    if ranks and data.times and ran:
        fig, axes = plt.subplots(2, 1, figsize=(10, 1.6 + 0.9 * len(ranks)), squeeze=False)
        t0 = data.times[0]
        extent = (0.0, max(1e-3, data.times[-1] - t0), len(ranks) - 0.5, -0.5)
        for ax, idx, label in (
            (axes[0][0], 0, "step time (s)"),
            (axes[1][0], 1, "arrival lag (s)"),
        ):
            grid = [
                [math.nan if (v := c[idx]) is None else v for c in data.cells[r]] for r in ranks
            ]
            width = max(len(row) for row in grid)
            grid = [row + [math.nan] * (width - len(row)) for row in grid]
            # Log colours: a 50 ms step and a 20 s stall on one scale.
            finite = [v for row in grid for v in row if v == v and v > 0]
            norm = LogNorm(min(finite), max(finite) * 1.01) if len(finite) > 1 else None
            im = ax.imshow(
                grid,
                aspect="auto",
                cmap="magma_r",
                extent=extent,
                interpolation="nearest",
                norm=norm,
            )
            ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
            for tick, r in zip(ax.get_yticklabels(), ranks, strict=True):
                if r in culprits:
                    tick.set_color("red")
                    tick.set_fontweight("bold")
            for t, what, kind in marks:
                if 0 <= t - t0 <= extent[1]:
                    colour = "tab:green" if kind == "recovery" else "tab:blue"
                    ax.axvline(t - t0, color=colour, linewidth=1, linestyle="--")
                    if idx == 0 and kind in ("incident", "recovery"):  # the others: lines only
                        # Inside the plot: a label right of centre runs leftwards.
                        left = t - t0 > extent[1] / 2
                        ax.annotate(
                            printable(what.split(" ", 1)[1]),
                            (t - t0, -0.5),
                            fontsize=7,
                            xytext=(-2 if left else 2, -9),
                            textcoords="offset points",
                            ha="right" if left else "left",
                            color=colour,
                            annotation_clip=True,
                        )
            ax.set_title(f"{label} per rank (culprit in red; dashed: incident, action, resumed)")
            ax.set_xlabel("seconds since the report began")
            bar = fig.colorbar(im, ax=ax, label=label)
            # Plain numbers: with maths text off, a log scale's ticks read "$\\mathdefault..$".
            bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            bar.ax.yaxis.set_minor_formatter(NullFormatter())
        fig.tight_layout()
        written["heatmap"] = out / "heatmap.png"
        fig.savefig(written["heatmap"], dpi=100)
        plt.close(fig)
    if marks:
        fig, ax = plt.subplots(figsize=(10, 1.2 + 0.3 * len(marks)))
        t0 = min(t for t, _, _ in marks)
        span = max(1e-3, max(t for t, _, _ in marks) - t0)
        for i, (t, label, kind) in enumerate(marks):
            colour = "tab:green" if kind == "recovery" else "tab:red"
            ax.plot([t - t0], [i], "o", color=colour)
            # Labels stay inside the axes: those right of centre run leftwards.
            left = t - t0 > span / 2
            ax.annotate(
                printable(label),
                (t - t0, i),
                xytext=(-6 if left else 6, -3),
                textcoords="offset points",
                ha="right" if left else "left",
                color="tab:green" if kind == "recovery" else "black",
            )
        ax.set_yticks([])
        ax.set_xlabel(f"seconds after {datetime.fromtimestamp(t0):%H:%M:%S}")
        ax.set_title("incident timeline (green: training resumed)")
        ax.set_xlim(-0.05 * span, 1.05 * span)
        ax.set_ylim(-0.7, len(marks) - 0.3)
        fig.tight_layout()
        written["timeline"] = out / "timeline.png"
        fig.savefig(written["timeline"], dpi=100)
        plt.close(fig)
    return written


def _e(text: object) -> str:
    return html.escape(printable(text))


def write_report(data: ReportData, out: Path) -> Path:
    """``out/report.html`` (images inlined: one file to send), and its PNGs beside it."""
    out.mkdir(parents=True, exist_ok=True)
    pngs = render_pngs(data, out)
    culprits, where = data.culprit()
    if culprits:
        places = "; ".join(
            f"rank {r}" + (f" stuck at {where[str(r)]}" if where.get(str(r)) else "")
            for r in culprits
        )
        headline = f"Culprit: {places}"
    else:
        headline = "No culprit named (no hang seen)"
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>trainprobe report: {_e(data.job_id)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;background:#fff;color:#111}"
        "h1{font-size:1.4em}.culprit{background:#fdd;border-left:6px solid #c00;padding:.6em}"
        "pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap}img{max-width:100%}</style>",
        "</head><body>",
        f"<h1>trainprobe report: job {_e(data.job_id)}</h1>",
        f"<p>written {datetime.now():%Y-%m-%d %H:%M:%S}; "
        f"{len(data.times)} status samples, {len(data.stories)} incident(s)</p>",
        f"<p class='culprit' id='culprit'>{_e(headline)}</p>",
        "<h2>what happened</h2>",
        f"<p id='story'>{_e(what_happened(data.stories, data.times, data.steps))}</p>",
    ]
    parts += [f"<p class='note'>{_e(n)}</p>" for n in data.notes]
    for name, path in pngs.items():
        b64 = base64.b64encode(path.read_bytes()).decode()
        parts.append(f"<h2>{_e(name)}</h2><img alt='{_e(name)}' src='data:image/png;base64,{b64}'>")
    parts.append("<h2>incidents</h2>")
    if not data.stories:
        parts.append("<p>(none in the incident log)</p>")
    for s in data.stories:
        line = culprit_line(s.incident)
        parts.append(
            f"<h3 id='incident-{_e(s.id)}'>incident {_e(s.id)}</h3>"
            f"<p>{_e(summary_line(s))}</p>" + (f"<p>{_e(line)}</p>" if line else "")
        )
        parts.append("<pre>" + "\n".join(_e(x) for x in timeline(s)) + "</pre>")
    parts.append("</body></html>")
    page = out / "report.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page
