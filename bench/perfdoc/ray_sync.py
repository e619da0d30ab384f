"""The Ray job sync's section and plot: what each node's sidecar receives a sync,
today's digest-and-deltas protocol against every rank every time, 10 to 12,500 nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .core import Lines, Result, closing, head, missing, row

__all__ = ["RAY_SYNC_ANCHOR", "ray_sync_goals", "ray_sync_plot", "ray_sync_section"]

RAY_SYNC_ANCHOR = "under-ray-what-each-sidecar-receives"


def _kib(b: float) -> str:
    return f"{b / 1024:.1f} KiB" if b < 2**20 else f"{b / 2**20:.1f} MiB"


def ray_sync_goals(r: Result) -> dict[str, tuple[str, bool]]:
    """(measured, met) for the steady state and an open incident: a sidecar's bytes a sync
    must not grow with the number of nodes (the largest within 2x of the smallest)."""
    rows = sorted(r["rows"], key=lambda x: x["nodes"])
    lo, hi = rows[0], rows[-1]
    out = {}
    for phase, key in (("steady", "after_bytes"), ("incident", "after_mean_bytes")):
        a, b = lo[phase][key], hi[phase][key]
        got = (
            f"{_kib(a)} at {lo['nodes']:,} nodes, {_kib(b)} at {hi['nodes']:,} "
            f"(every rank each time: {_kib(hi[phase]['before_bytes'])})"
        )
        out[phase] = (got, b <= 2 * a)
    return out


def ray_sync_section(r: Result | None) -> Lines:
    out = ["## Under Ray: what each sidecar receives", ""]
    if r is None:
        return out + missing("ray_sync")
    out += [
        "Each node's sidecar syncs its ranks with the job's coordinator every "
        f"{r['interval_s']:g} s.",
        "While the job is healthy the coordinator answers with a digest of fixed size (ranks",
        "held, the step range, the first suspects); only while a sidecar needs the other",
        "nodes' ranks (a suspect, a silent rank, an open episode, `diagnose`) does it get them,",
        "as the ranks changed since its last sync. The bench runs the real coordinator state and",
        f"sidecar views in one process, {r['ranks_per_node']} ranks a node, and weighs the",
        f"pickled replies of {r['sampled_sidecars']} sidecars. *Before*: every other rank, every",
        "sync, as the sync did until this protocol.",
        "",
        *head(
            "nodes",
            "healthy: a sync",
            "before",
            "incident: mean (largest)",
            "before",
            "a sidecar sends",
            "coordinator a sync",
        ),
    ]
    for x in sorted(r["rows"], key=lambda x: x["nodes"]):
        st, inc = x["steady"], x["incident"]
        out.append(
            row(
                f"{x['nodes']:,} ({x['ranks']:,} ranks)",
                f"**{_kib(st['after_bytes'])}**",
                _kib(st["before_bytes"]),
                f"{_kib(inc['after_mean_bytes'])} ({_kib(inc['after_max_bytes'])})",
                _kib(inc["before_bytes"]),
                _kib(x["sent_bytes"]),
                f"{x['coordinator_sync_us']:.0f} µs",
            )
        )
    out += [
        "",
        "While an incident is open every sidecar fetches the job once, then what changed: that",
        "still grows with the nodes. At 12,500 nodes one coordinator would spend more than one",
        "core on the syncs alone (the per-sync figure times two syncs a second per node).",
        "",
    ]
    return [*out, *closing(r, "ray_sync", "what each sidecar receives a sync")]


def ray_sync_plot(res: dict[str, Any], out: Path) -> bool:
    r = res.get("ray_sync")
    if r is None:
        return False
    from .plotting import finish, plt

    rows = sorted(r["rows"], key=lambda x: x["nodes"])
    n = [x["nodes"] for x in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    lines = (("steady", "after_bytes", "-o"), ("incident", "after_mean_bytes", "-s"))
    for phase, key, style in lines:
        ax.plot(n, [x[phase][key] for x in rows], style, label=f"{phase}: digest and deltas")
        ax.plot(n, [x[phase]["before_bytes"] for x in rows], style, alpha=0.4,
                label=f"{phase}: every rank, every sync")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes (8 ranks each)")
    ax.legend(fontsize=7)
    finish(fig, ax, out, "bytes a sidecar receives a sync", "Under Ray: what each sidecar receives",
           False, "both")  # fmt: skip
    return True
