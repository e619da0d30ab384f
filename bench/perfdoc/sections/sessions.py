"""Sessions at the cap (what each layer costs), a burst of opens, 2,000 workers at 10 Hz."""

from __future__ import annotations

from ..core import Lines, Result, command, head, row, s

GOAL_RSS_MB = 150
NAMES = (
    "session_cost",
    "session_cost_relayed",
    "burst",
    "scale_overload",
    "scale_overload_relay",
    "session_structures",
    "session_cost_relayed_off",
)
STAGES = ("idle", "connections", "streams", "reports", "closed")


def sessions_section(
    cost: Result | None,
    relayed: Result | None,
    burst: Result | None,
    load: Result | None,
    load_relay: Result | None = None,
    structures: Result | None = None,
    relayed_off: Result | None = None,
) -> Lines:
    out = ["## Sessions at the cap, bursts, 2,000 workers at 10 Hz", ""]
    have = dict(
        zip(NAMES, (cost, relayed, burst, load, load_relay, structures, relayed_off), strict=True)
    )
    for name, r in have.items():
        if r is None:
            out += [f"*No result file `bench/results/{name}.json` yet.*", ""]
    costs = [
        (how, r)
        for how, r in (("direct", cost), ("relayed", relayed), ("relayed", relayed_off))
        if r is not None
    ]
    if costs:
        out += [*head("sessions arrive", *(f"RSS {name}" for name in STAGES), "peak")]
        for how, r in costs:
            st = {x["stage"]: x for x in r["stages"]}
            out.append(row(_arrival(how, r), *(_stage(st[n]) for n in STAGES), _peak(r)))
        out += [
            "",
            "Each column is the sidecar's RSS (shipped defaults, every action `observe`) once it "
            "has applied that stage (in brackets, the step per session): its idle process, "
            "the connections, a session per stream past "
            "its Hello, three reports each (the first with 1,000 earlier step times; each "
            "step with 4 DDP allreduces, the latest 16 sampled, as `watch_ddp` reports them), "
            "then "
            f"every session ended. Goal: {GOAL_RSS_MB} MB at the cap. A direct session is a "
            "gRPC stream of its own; more than half of that is gRPC core's call and HTTP/2 stream "
            "(C, outside Python's heap), which one stream per session cannot avoid. Relayed "
            "sessions (a sidecar of many ranks gets them through node sidecars) share their "
            "node's stream"
            + (
                f"; before any report the relayed sidecar is at {_mb(relayed, 'streams')}, "
                "most of it its idle process (the interpreter, gRPC, protobuf, OpenTelemetry) "
                "and gRPC core's memory for each Relay stream"
                if relayed is not None
                else ""
            )
            + ". After the reports the cost is the session's own state: its step-time window, "
            "its telemetry (per-rank histograms and the trace's step and collective history), "
            "and what the allocators keep after the burst of the first reports."
            + (
                f" Of a session's state, {structures['bytes_per_session'] / 1024:.1f} KiB are "
                "Python objects once its reports are applied (in process, by tracemalloc, "
                f"{structures['params']['sessions']:,} sessions)."
                if structures is not None
                else ""
            ),
            "",
        ]
    if burst is not None:
        p = burst["params"]
        line = (
            f"A burst of {p['streams']:,} stream opens ({p['generators']} processes): "
            f"**{burst['failed']}** ended early (goal 0; with gRPC's default queue of 1,000 "
            "unrequested calls, hundreds were CANCELLED after their Hello)."
        )
        if costs:  # one paragraph with the table's note (the page's length)
            out[-2] += " " + line
        else:
            out += [line, ""]
    loads = [r for r in (load_relay, load) if r is not None and r["levels"]]
    if loads:
        out += _load(loads)
    done = [(n, r) for n, r in have.items() if r is not None]
    if done:
        where = {
            f"{r['machine']['cpus']} CPUs, load {r['machine']['loadavg_at_start'][0]}"
            for _, r in done
        }
        out += ["```bash", *(command(r, n) for n, r in done), "```", ""]
        out += [f"<sub>Measured on {'; '.join(sorted(where))} at the start.</sub>", ""]
    return out


def _load(results: list[Result]) -> Lines:
    out = [
        *head(
            "streams",
            "offered",
            "sent",
            "processed",
            "shed",
            "verdict p50 / p99",
            "false incidents",
            "streams lost",
        )
    ]
    notes = []
    for r in results:
        x = r["levels"][0]
        k = r.get("relay_workers_per_node") or 0
        how = f"relayed, {k} a node" if k else "direct"
        lost = x.get("streams_lost")
        out.append(
            row(
                how,
                f"{x['offered_per_s']:,.0f}/s",
                f"{x['sent_per_s']:,.0f}/s",
                f"{x['processed_per_s']:,.0f}/s",
                f"{x.get('reports_shed', 0):,}",
                # Relayed: from the hook's send, through its node's batch interval.
                f"{s(x.get('lag_from_hook_p50_s', x['lag_p50_s']))} / "
                f"{s(x.get('lag_from_hook_p99_s', x['lag_p99_s']))}",
                f"**{x['false_incidents']}**",
                "" if lost is None else f"{lost:,}",
            )
        )
        if not k and lost:
            notes.append(
                f"The direct run's generators sent {x['sent_per_s']:,.0f} of the "
                f"{x['offered_per_s']:,.0f} reports a second offered: {lost:,} of its streams "
                "ended CANCELLED right after connecting, before the sidecar saw their Hello "
                "(no incident names them). This run had gRPC's own limit: a call its server has "
                "not asked for within 30 s is cancelled, and a loop busy with the other "
                "streams' reports asks for new calls slowly. The shipped sidecar lets such a "
                "call wait 300 s; at this load, accepting every stream then takes minutes. "
                "One core applies about 10,000 reports a second from direct streams: past "
                "that, run node sidecars in relay mode, which fold each node's reports into "
                "one stream."
            )
    out += [
        "",
        "2,000 workers at 10 Hz, telemetry on, every action `observe`, the sidecar on its own "
        "core; goal 0 false "
        "incidents, a verdict within 5 s (p50 / p99 from a report's send by the worker to its "
        "verdict; relayed, that includes the node's 500 ms batch interval).",
    ]
    if notes:
        out[-1] += " " + " ".join(notes)
    return [*out, ""]


def _arrival(how: str, r: Result) -> str:
    p = r["params"]
    if how == "direct":
        return f"{p['streams']:,} Connect streams over {p['connections']} connections"
    k = p["relayed"]
    off = ", telemetry off (`--no-telemetry`)" if p.get("telemetry") == "off" else ""
    return f"{p['streams']:,} relayed, {k} a node ({p['streams'] // k:,} Relay streams){off}"


def _mb(r: Result, stage: str) -> str:
    return f"{next(x for x in r['stages'] if x['stage'] == stage)['rss_bytes'] / 1e6:.0f} MB"


def _peak(r: Result) -> str:
    peak = max(x["rss_bytes"] for x in r["stages"]) / 1e6
    return f"{peak:.0f} MB ({'met' if peak <= GOAL_RSS_MB else '**not met**'})"


def _stage(x: dict) -> str:
    each = f" ({x['rss_per_item'] / 1024:.1f} KiB)" if x.get("rss_per_item") else ""
    return f"{x['rss_bytes'] / 1e6:.0f} MB{each}"
