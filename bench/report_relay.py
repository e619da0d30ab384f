"""Markdown for the relayed scale benchmark (bench/results/scale_relay.json)."""

from __future__ import annotations

from typing import Any

from report_sections import provenance, scale_rows, yes


def interval_ms(r: dict[str, Any]) -> float:
    """The nodes' relay_interval_ms (results before the knob: one batch per report period)."""
    ms = r.get("relay_interval_ms")
    return float(ms) if ms else 1000.0 / r["params"]["hz"]


def per_batch(r: dict[str, Any]) -> float:
    """Reports in one node's batch: K workers x reports each made in one interval."""
    return r["relay_workers_per_node"] * interval_ms(r) / 1000.0 * r["params"]["hz"]


def relay_goal(r: dict[str, Any]) -> str:
    """The goals-table row for relay mode."""
    k = r["relay_workers_per_node"]
    return (
        f"| (relay mode: nodes of {k} workers, one batch every {interval_ms(r):g} ms, "
        f"{per_batch(r):g} reports per batch) | "
        f"{r['max_sustained_per_s']:,.0f} reports/s sustained "
        f"({r['max_sustained_per_s'] / r['goal_per_s']:.0%} of the goal) | {yes(r['goal_met'])} |"
    )


def relay_section(r: dict[str, Any], first: bool = True) -> list[str]:
    p = r["params"]
    k, ms = r["relay_workers_per_node"], interval_ms(r)
    title = f"{k} workers per node, one batch every {ms:g} ms ({per_batch(r):g} reports per batch)"
    if not first:
        return [
            f"#### Relayed, {title}",
            "",
            provenance(r),
            "",
            f"As above, with each node's `relay_interval_ms` at {ms:g}: every batch carries "
            f"every report its {k} workers (each at {p['hz']:g} Hz) made since the previous "
            "one. Lag from receipt as above; the lag from the hook adds up to one interval.",
            "",
            *scale_rows(r),
            "",
        ]
    out = [
        "### Relayed: one upstream sidecar behind node sidecars in relay mode",
        "",
        provenance(r),
        "",
        f"**{title}.** "
        f"The same measurement with `bench/relay_loadgen.py` as the load: each simulated node "
        f"sidecar (`--relay-to`) has one `Relay` stream and {k} workers reporting at "
        f"{p['hz']:g} Hz, and every {ms:g} ms (its `relay_interval_ms`) sends one `RelayBatch` "
        "carrying every report its workers made since the previous batch. "
        "Lag = the batch carrying a probe report sent by its node (the upstream's receipt, "
        "give or take the socket) → its HUNG incident, as the issue defines it (from receiving "
        "a report); `lag p99 from hook` counts from when the probe's hook made the report, "
        "so it adds the node's batching delay (0 to one interval), which is not the upstream's "
        "doing. Relayed results before this definition counted from the hook.",
        "",
        *scale_rows(r),
        "",
    ]
    prof = r.get("profile")
    if prof:
        lvl, inc = prof["level"], prof["inclusive"]
        out += [
            f"Where the core goes (py-spy, 100 Hz, one more run at N = {prof['workers']:,}: "
            f"{lvl['processed_per_s']:,.0f} reports/s, sidecar CPU "
            f"{lvl['sidecar_cpu'] * 100:.0f}%; shares of {prof['samples']} samples):",
            "",
            f"- inclusive: the relay stream loop `RelayUpstream._read` "
            f"{inc.get('RelayUpstream._read', 0):.0%}, of which the per-message path shared with "
            f"Connect `SidecarServicer.handle` {inc.get('SidecarServicer.handle', 0):.0%} "
            f"(`Registry.apply` {inc['Registry.apply']:.0%}, `convert.report_from_pb` "
            f"{inc['report_from_pb']:.0%}); the rules tick `Engine.tick` {inc['Engine.tick']:.0%}.",
            "- top frames by own time: "
            + "; ".join(f"`{x['frame']}` {x['share']:.0%}" for x in prof["self_top"][:6])
            + ".",
            "",
        ]
    return out
