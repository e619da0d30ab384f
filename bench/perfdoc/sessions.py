"""Sessions at the cap (what each layer costs), a burst of opens, 2,000 workers at 10 Hz."""

from __future__ import annotations

from .core import Lines, Result, command, head, row, s

GOAL_RSS_MB = 150
NAMES = ("session_cost", "burst", "scale_overload")


def sessions_section(cost: Result | None, burst: Result | None, load: Result | None) -> Lines:
    out = ["## Sessions at the cap, bursts, 2,000 workers at 10 Hz", ""]
    have = dict(zip(NAMES, (cost, burst, load), strict=True))
    for name, r in have.items():
        if r is None:
            out += [f"*No result file `bench/results/{name}.json` yet.*", ""]
    if cost is not None:
        st = {x["stage"]: x for x in cost["stages"]}
        stages = ("idle", "connections", "streams", "reports", "closed")
        peak = max(x["rss_bytes"] for x in cost["stages"]) / 1e6
        out += [
            *head(*(f"RSS {name}" for name in stages)),
            row(*(_stage(st[name]) for name in stages)),
            "",
            f"{cost['params']['streams']:,} sessions over {cost['params']['connections']} "
            f"connections: peak {peak:.0f} MB, goal {GOAL_RSS_MB} MB, "
            f"{'met' if peak <= GOAL_RSS_MB else '**not met**'}. Of a stream's ~33 KiB about "
            "18.5 KiB is Python (`--traced`: coroutine, tasks, queue, gRPC's call objects), the "
            "rest gRPC core; the first report adds ~22 KiB, nearly all C, in gRPC's threads' "
            "arenas (the maps beside glibc's heap), which glibc keeps after close.",
            "",
        ]
    if burst is not None:
        p = burst["params"]
        out += [
            f"A burst of {p['streams']:,} stream opens ({p['generators']} processes): "
            f"**{burst['failed']}** ended early (goal 0; with gRPC's default queue of 1,000 "
            "unrequested calls, hundreds were CANCELLED after their Hello).",
            "",
        ]
    if load is not None:
        x = load["levels"][0]
        out += [
            *head("offered", "sent", "processed", "shed", "verdict p50 / p99", "false incidents"),
            row(
                f"{x['offered_per_s']:,.0f}/s",
                f"{x['sent_per_s']:,.0f}/s",
                f"{x['processed_per_s']:,.0f}/s",
                f"{x['reports_shed']:,}",
                f"{s(x['lag_p50_s'])} / {s(x['lag_p99_s'])}",
                f"**{x['false_incidents']}**",
            ),
            "",
            "2,000 workers at 10 Hz, direct streams, telemetry on, the sidecar on its own core; "
            "goal 0 false incidents, a verdict within 5 s. They are DEAD verdicts of generator "
            f"streams that ended without a Goodbye ({x['generator_errors']} writes on finished "
            "calls), cause not yet known.",
            "",
        ]
    done = [(n, r) for n, r in have.items() if r is not None]
    if done:
        where = {
            f"{r['machine']['cpus']} CPUs, load {r['machine']['loadavg_at_start'][0]}"
            for _, r in done
        }
        out += ["```bash", *(command(r, n) for n, r in done), "```", ""]
        out += [f"<sub>Measured on {'; '.join(sorted(where))} at the start.</sub>", ""]
    return out


def _stage(x: dict) -> str:
    each = f" ({x['rss_per_item'] / 1024:.1f} KiB each)" if x.get("rss_per_item") else ""
    return f"{x['rss_bytes'] / 1e6:.0f} MB{each}"
