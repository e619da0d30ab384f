"""``trainprobe top``: a live view of every rank, refreshed from a running sidecar.

One row per rank; to its right the recent windows (one per refresh, newest on
the right), each coloured by the rank's collective arrival lag (``--by lag``,
the straggler signal) or its step time (``--by step``). Ranks with a non-OK
verdict are marked SUSPECT, the culprits of the job's current diagnosis
CULPRIT and the ranks that only wait for them WAITING; a rank trainprobe
killed or evicted reads KILLED or EVICTED. Above the table, each job's
decision: the patience countdown while the sidecar watches (as ``trainprobe
status`` says it), then what it did (KILLED, EVICTED, RESUMED) and when;
beneath the table, the incident feed: what changed, as the sidecar's
status and diagnosis said it. Keys: ``q`` quits, ``l``/``s`` colour by lag or
step time.

Everything comes from the ``GetStatus`` and ``Diagnose`` RPCs; the model
(:class:`TopModel`) is plain data, so the demos render it too. This module
draws a frame; the loop that fetches, redraws and reads keys is :mod:`.top_live`.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from trainprobe.sidecar.cli.top.model import (
    FEED_LINES,
    LAG_BAD_S,
    STYLES,
    WINDOWS,
    RankRow,
    TopModel,
    colour,
    job_step_s,
)
from trainprobe.sidecar.core.text import printable

__all__ = ["LAG_BAD_S", "TopModel", "colour", "render"]

#: Lines render itself takes besides the rank rows: the title, the header and
#: its rule, the feed's head, and a spare line for the prompt.
_CHROME_LINES = 5


def render(
    model: TopModel,
    by: str = "lag",
    title: str = "trainprobe top",
    width: int = 120,
    height: int = 0,
) -> Group:
    """The table and the feed, as rich renderables, fitted to ``width`` x ``height``
    (0: any height). Every client string goes in as escaped plain text, never markup."""
    jobs = sorted({job for job, _ in model.rows})
    one_job = len(jobs) == 1
    names = _job_names(model)
    head = f"{title}" + (f"  job {_job_label(names, jobs[0], with_id=True)}" if one_job else "")
    table = Table(
        title=Text(f"{head}  (colour: {by}; q quits, l/s switch)", overflow="ellipsis"),
        expand=False,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title_justify="left",
    )
    columns = [("RANK", "right"), ("STEP", "right"), ("STEPS/S", "right"), ("LAG", "right")]
    columns += [("VERDICT", "left"), ("", "left")]
    if not one_job:
        columns.insert(0, ("JOB", "left"))
    steps = {job: job_step_s(model, job) for job in jobs}
    feed_lines = min(FEED_LINES, max(1, len(model.feed)))
    decisions = _decision_lines(model, jobs, names, one_job)
    # Wrapped, not cut: the culprit's file:line is at the end of the countdown.
    taken = sum(-(-len(d.plain) // max(20, width)) for d in decisions)
    room = height - _CHROME_LINES - feed_lines - 1 - taken if height else len(model.rows)
    shown, hidden = _rows_to_show(model, max(1, room))
    rows = [
        _row_cells(model, key, model.rows[key], None if one_job else _job_label(names, key[0]))
        for key in shown
    ]
    # The recent windows take what the other columns leave of the width.
    # Each column: its widest cell, 2 of padding and 1 of separator; 2 for the edges.
    used = 2 + sum(
        max([len(name), *(len(r[i].plain) for r in rows)]) + 3
        for i, (name, _) in enumerate(columns)
    )
    windows = max(4, min(WINDOWS, width - used - 3))
    columns.append((f"RECENT {by.upper()} (newest right)"[:windows], "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True, overflow="crop")  # type: ignore[arg-type]
    idx = 1 if by == "lag" else 0
    for key, cells in zip(shown, rows, strict=True):
        row = model.rows[key]
        strip = Text()
        for cell in list(row.cells)[-windows:]:
            level = colour(cell[idx], by, steps.get(key[0]))
            strip.append("█" if level >= 0 else "·", style=STYLES[level] if level >= 0 else "dim")
        table.add_row(*cells, strip, style=_ROW_STYLE[_mark(model, key)])
    # Notes under the table, not in a cell: a cell would widen its column.
    feed: list[Text] = []
    if hidden:
        feed.append(Text(f"… {hidden} more ranks (narrow with --job)", style="dim"))
    if not model.rows:
        feed.append(Text("(no workers have reported)"))
    feed.append(Text("incidents:", style="bold"))
    for line in list(model.feed)[-feed_lines:] or ["(none)"]:
        # A recovery in green, a new verdict or finding in red, stream changes plain.
        style = (
            "green"
            if line.endswith(("-> OK", "-> RESUMED"))
            else "red"
            if "stream " not in line
            else ""
        )
        feed.append(
            Text(
                f"  {printable(line)}",
                style=style if line != "(none)" else "dim",
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    return Group(*decisions, table, *feed)


#: How a rank is marked: the culprit, a rank that only waits for it, another
#: rank whose verdict is not OK, or nothing.
_MARKS = {
    "CULPRIT": Text("CULPRIT", style="bold white on red"),
    "WAITING": Text("WAITING", style="cyan"),
    "SUSPECT": Text("SUSPECT", style="bold black on yellow"),
    "": Text(""),
}
_ROW_STYLE = {"CULPRIT": "bold red", "WAITING": "", "SUSPECT": "yellow", "": ""}
#: A decision line's colour by its first word.
_DECISION_STYLE = {"HUNG?": "bold red", "PAUSED": "yellow", "RESUMED": "green"}


def _mark(model: TopModel, key: tuple[str, int]) -> str:
    if key[1] in model.culprits.get(key[0], ()):
        return "CULPRIT"
    if key[1] in model.waiting.get(key[0], ()):
        return "WAITING"  # it waits for the culprit: not a suspect
    return "SUSPECT" if model.rows[key].shown not in ("", "OK") else ""


def _decision_lines(
    model: TopModel, jobs: list[str], names: dict[str, str], one_job: bool
) -> list[Text]:
    """Each job's decision, as it happens and after it (escaped, wrapped)."""
    out = []
    for job in jobs:
        line = model.decisions.get(job)
        if not line:
            continue
        style = _DECISION_STYLE.get(line.split(" ", 1)[0], "bold red")
        text = printable(line) if one_job else f"{_job_label(names, job)}: {printable(line)}"
        out.append(Text(text, style=style, overflow="fold"))
    return out


def _rows_to_show(model: TopModel, room: int) -> tuple[list[tuple[str, int]], int]:
    """The rows that fit: culprits, then suspects, then the rest, each in rank order."""
    keys = sorted(model.rows)
    if len(keys) <= room:
        return keys, 0

    def rank_of(key: tuple[str, int]) -> int:
        if key[1] in model.culprits.get(key[0], ()):
            return 0
        return 1 if model.rows[key].status.verdict not in ("", "OK") else 2

    room = max(1, room - 1)  # one line says how many are left out
    chosen = sorted(sorted(keys, key=rank_of)[:room])
    return chosen, len(keys) - len(chosen)


def _row_cells(model: TopModel, key: tuple[str, int], row: RankRow, job: str | None) -> list[Text]:
    """The rank's cells; ``job``: its job's label, for a table of several jobs."""
    w = row.status
    mark = _MARKS[_mark(model, key)].copy()
    lag = w.arrival_lag if w.HasField("arrival_lag") else None
    lag_text = f"{lag.p50_s * 1e3:.0f}/{lag.max_s * 1e3:.0f}ms" if lag and lag.count else "-"
    # A rank we killed reads KILLED, not how its stream ended ("OK (vanished)").
    acted = row.shown in ("KILLED", "EVICTED")
    verdict = row.shown + ("" if w.state == "connected" or acted else f" ({w.state})")
    cells = [
        Text(str(key[1])),
        Text(str(w.step) if w.has_step else "-"),
        Text(f"{w.steps_per_s:.2f}"),
        Text(lag_text),
        Text(printable(verdict)),
        mark,
    ]
    if job is not None:
        # Cut in the middle: default names (the script, then its start time)
        # differ only at the end.
        cells.insert(0, Text(job if len(job) <= 16 else job[:7] + "…" + job[-8:]))
    return cells


def _job_names(model: TopModel) -> dict[str, str]:
    """Each job's human name, where its hooks sent one (once a frame, not a row):
    a verified rank's first, as status heads the job."""
    names: dict[str, str] = {}
    rows = sorted(model.rows.items(), key=lambda kv: not kv[1].status.verified)
    for (job, _), row in rows:
        if row.status.job_name and job not in names:
            names[job] = row.status.job_name
    return names


def _job_label(names: dict[str, str], job: str, with_id: bool = False) -> str:
    """The job as `trainprobe status` names it: its human name where the hooks sent
    one (then, in the title, the id that `diagnose --job` and the logs carry)."""
    name = names.get(job, "")
    if not name or name == job:
        return printable(job)
    return f"{printable(name)} (id {printable(job)})" if with_id else printable(name)
