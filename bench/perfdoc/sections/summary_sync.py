"""Summary mode's section: one upstream sidecar fed by node sidecars' JobSync
streams (``job_sync_to``), its CPU, memory and messages in the steady state
and during an incident; the 16-core machine's large sizes as measured before
the start's detail storm was fixed, beside this machine's small ones after."""

from __future__ import annotations

from ..core import Lines, Result, command, head, missing, reproduce, row

__all__ = [
    "AFTER",
    "BEFORE",
    "HOST2",
    "SUMMARY_SYNC_ANCHOR",
    "summary_sync_goals",
    "summary_sync_section",
]

SUMMARY_SYNC_ANCHOR = "summary-mode-one-upstream-for-the-largest-jobs"
#: The 16-core machine's runs before the fix (bench/results/<name>.json).
BEFORE = tuple(f"summary_sync_gpu_before_{n}" for n in (2500, 6250, 12500))
#: The 16-core machine's run after it, where there is one.
AFTER = "summary_sync_gpu"
#: The same run on another 16-core host of the device pool (a slower CPU:
#: the same steady work costs it more), where there is one.
HOST2 = "summary_sync_gpu_host2"
#: Cores measured of an upstream pinned to one CPU that mean it had no more to give.
SATURATED = 0.99


def _row(x: Result, when: str) -> str:
    named = x.get("culprit_named_after_s")
    false = x.get("false_culprits")
    return row(
        when,
        f"{x['nodes']:,} ({x['ranks']:,})",
        f"**{x['upstream_cores']:.3f}**",
        f"{x['upstream_rss_mb']:.0f} MB ({x['upstream_peak_rss_mb']:.0f})",
        f"{x['sent_per_s']:,.0f} / {x['received_per_s']:,.0f}",
        "not counted" if false is None else false,
        f"{x.get('incident_upstream_cores', float('nan')):.3f}",
        ("never" if named is None else f"**{named:.1f} s**")
        + (f" ({x['stop_sent_after_s']:.2f} s)" if "stop_sent_after_s" in x else ""),
    )


def summary_sync_goals(
    after: Result | None, where: str = ""
) -> list[tuple[str, str, str, str, bool]]:
    """Headline rows from a 16-core host's run: (figure, goal, measured, anchor, met);
    ``where`` names the host in the figure's name."""
    rows = {x["ranks"]: x for x in (after or {}).get("rows", [])}
    out: list[tuple[str, str, str, str, bool]] = []
    if big := rows.get(100_000):
        named = big.get("culprit_named_after_s")
        cores, inc = big["upstream_cores"], big.get("incident_upstream_cores", float("inf"))
        mb = max(big["upstream_peak_rss_mb"], big.get("incident_peak_rss_mb", 0.0))
        # The upstream is pinned to one CPU: a full core measured is demand past it.
        hang = "saturated (1.00)" if inc >= SATURATED else f"{inc:.2f} cores"
        out.append((
            f"one upstream, 100,000 ranks{where}", "≤ 1 core, ≤ 1 GB; during a hang too",
            f"{cores:.2f} cores, {mb:.0f} MB peak; hang: {hang}",
            "relay mode: one upstream serves about 5,000 ranks",
            cores < SATURATED and inc < SATURATED and mb <= 1000,
        ))  # fmt: skip
        out.append((
            f"one upstream, 100,000 ranks{where}: culprit named",
            "≤ 5 s after onset, 0 false culprits",
            ("never" if named is None else f"{named:.1f} s") + f", {big['false_culprits']} false",
            "NCCL watchdog 10 min",
            named is not None and named <= 5 and big["false_culprits"] == 0,
        ))  # fmt: skip
    if (ten := rows.get(10_000)) and not where:
        mb = ten["upstream_peak_rss_mb"]
        out.append((
            f"10,000 ranks, summary mode{where}", "upstream RSS ≤ 150 MB", f"peak {mb:.0f} MB",
            "relayed sessions: see below", mb <= 150,
        ))  # fmt: skip
    return out


def summary_sync_section(
    r: Result | None,
    before: list[Result | None],
    after: Result | None = None,
    host2: Result | None = None,
) -> Lines:
    out = ["## Summary mode: one upstream for the largest jobs", ""]
    if r is None:
        return out + missing("summary_sync")
    out += [
        "Outside Ray, node sidecars judge their own ranks and keep one JobSync stream each to an "
        "upstream sidecar, which runs the cross-node analysis on their summaries. The bench runs "
        "a real upstream pinned to one CPU and simulated nodes of 8 healthy ranks, each on a "
        "real stream running the node's own code (what to send, what to ask) every 500 ms. The "
        "steady state is measured after the start (once the messages sent over a 10 s "
        "heartbeat match the heartbeat's before); then rank 0 stops and node 1's view names "
        "the culprit (seconds from "
        "the onset, and when node 0 sent the stopped rank: a busy machine delays the simulated "
        "nodes too). Goals at 100,000 ranks: "
        "≤ 1 core, ≤ 1 GB, the culprit named ≤ 5 s after the onset, 0 false culprits.",
        "",
        *head(
            "run",
            "nodes (ranks)",
            "upstream cores",
            "RSS (peak)",
            "sent / received a second",
            "false culprits",
            "incident: cores",
            "culprit named (rank 0's upload)",
        ),
    ]
    for x in sorted(r["rows"], key=lambda x: x["nodes"]):
        out.append(_row(x, f"{r['machine']['cpus']} CPUs, after"))
    for x in after["rows"] if after else ():
        out.append(_row(x, f"{after['machine']['cpus']} CPUs, after"))
    for x in host2["rows"] if host2 else ():
        out.append(_row(x, f"{host2['machine']['cpus']} CPUs, another host"))
    for b in before:
        for x in b["rows"] if b else ():
            out.append(_row(x, f"{b['machine']['cpus']} CPUs, **before**"))
    out += [
        "",
        "*Before*: the 16-core machine's runs before the fix. While a job had fewer ranks than "
        "its world size every node fetched the details (a message and an answer naming up to "
        "64 ranks twice a second each), and kept on for 10 s: at 2,500 nodes and more the "
        "upstream was still in the start's storm when measured (about a message a node a "
        "second; a healthy node sends one every 10 s). Now only a rank the job had and lost "
        "makes nodes ask, and a node polling for details gets a large job's verdict once per "
        "analysis, its summaries encoded once for every node. "
        + (
            "During a large job's incident the alarm that tells every node a rank turned "
            "suspect carries the job's verdict, so no node has to ask for it, and no node of "
            "such a job, verdict held or not, asks each sync: it sends what changed (once rank 0 "
            "stops, the others block in the "
            "allreduce and change nothing), the upstream analyses the job at most once a "
            "second, or every ranks / 50,000 s for a larger job (every 5 s once a culprit is "
            "named and no rank does anything new), and pushes an analysis when what a node acts "
            "on changes, serialized once for every node. The incident's columns count the 10 s "
            "after the onset, the burst included: every node's ranks enter the wait, every node "
            "hears of it and gets the verdict."
            if after
            else "The large sizes after the fix are yet to be measured on the 16-core machine."
        ),
        "",
        *reproduce(r, "summary_sync"),
        *(
            ["After, on the 16-core machine:", "", "```bash", command(after, AFTER), "```", ""]
            if after
            else []
        ),
        *(_host2(after, host2) if host2 else []),
        "Before, on the 16-core machine (each size one run, `--json` per size; the runs "
        "after likewise, merged into one file):",
        "",
        "```bash",
        command(before[-1], BEFORE[-1]) if before[-1] else "",
        "```",
        "",
    ]
    return out


def _host2(after: Result | None, host2: Result) -> Lines:
    """The second host's run: same command, another file; why its figures differ."""
    steady = {x["ranks"]: x["upstream_cores"] for x in (after or {}).get("rows", [])}
    big = next((x for x in host2["rows"] if x["ranks"] == 100_000), None)
    ratio = (
        f" (the steady state at 100,000 ranks cost it {big['upstream_cores']:.2f} cores "
        f"against {steady[100_000]:.2f}: a slower core)"
        if big and steady.get(100_000)
        else ""
    )
    return [
        "Another 16-core host of the same pool, the same code"
        + ratio
        + ": there one core is not enough for a 100,000-rank job's incident, and the culprit "
        "is named late. One run per size on each host; load average "
        f"{host2['machine']['loadavg_at_start'][0]} at the start: `{command(host2, HOST2)}`",
        "",
    ]
