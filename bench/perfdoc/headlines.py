"""The headline table: one row per figure, its goal, its anchor, met or missed."""

from __future__ import annotations

import math
import statistics

from .core import Lines, Result, head, row, s, us, yes
from .sections.detection import current_stall_floor, default_floor
from .sections.faults import fault_goals
from .sections.pressure import (
    INCIDENT_LOG_ANCHOR,
    STARVED_ANCHOR,
    incident_log_goals,
    starved_goals,
)
from .sections.ray_recovery import ray_survivor_goals
from .sections.ray_sync import RAY_SYNC_ANCHOR, ray_sync_goals
from .sections.recovery import recovery_goals
from .sections.restart import RESTART_ANCHOR, restart_goals
from .sections.scale import job_scale
from .sections.summary_sync import AFTER as SUMMARY_SYNC_AFTER
from .sections.summary_sync import HOST2 as SUMMARY_SYNC_HOST2
from .sections.summary_sync import SUMMARY_SYNC_ANCHOR, summary_sync_goals


def headlines(res: dict[str, Result | None]) -> Lines:
    """One row per headline figure: figure, goal, measured, anchor, met; from the results."""
    out = head("figure", "goal", "measured", "anchor", "")

    def add(name: str, section: str, goal: str, got: str, anchor: str, ok: bool) -> None:
        out.append(row(f"[{name}](#{section})", goal, got, anchor, yes(ok)))

    # Each call below is one row; kept on few lines so the table reads as a table.
    # fmt: off
    cost, mem, det, faults = res["cost"], res["hook_memory"], res["detection"], res["faults"]
    if mem and mem.get("per_call"):
        pc = mem["per_call"]
        add("hook cost a step", "the-hook-alone-and-its-memory", "median ≤ 1 µs, p99 ≤ 5 µs",
            f"{pc['net_median_ns'] / 1000:.2f} µs, p99 {pc['net_p99_ns'] / 1000:.2f} µs",
            "OpenTelemetry span: ~10 µs", pc["goal_met"])
    if cost:
        b, p = cost["modes"]["back_to_back"]["nvrx"], cost["modes"]["paced"]["nvrx"]
        add("vs NVRx heartbeat", "cost-on-the-training-thread", "≥ 50× cheaper",
            f"{b['ratio_median']:.0f}× / {p['ratio_median']:.0f}× (back-to-back / paced)",
            f"NVRx `send_heartbeat` {us(b['net_ns']['median'])}", cost["goal_met"])
    if mem:
        add("hook memory", "the-hook-alone-and-its-memory", f"≤ 2 MiB after {mem['steps']:,} steps",
            f"{mem['rss_growth_bytes'] / 2**20:.2f} MiB", "–", mem["goal_met"])
    if det:
        auto = [t for t in det["trials"] if t["tool"] == "tp_auto" and not t["control"]]
        worst = max((t["culprit_dead_s"] or math.inf) for t in auto)
        nvrx = max(g["culprit_dead_s"]["max"] for k, g in det["groups"].items()
                   if k.startswith("nvrx/"))
        add("hang killed, auto thresholds", "detection-and-kill-latency", "≤ 5 s",
            f"worst of {len(auto)}: {s(worst)}", f"NVRx worst {s(nvrx)}; NCCL watchdog 10 min",
            worst <= 5)
        default = [t for t in det["trials"] if t["tool"] == "tp_default"]
        if default:
            d = max((t["culprit_dead_s"] or math.inf) for t in default)
            add("the same, shipped defaults", "detection-and-kill-latency", "≤ 5 s",
                f"worst of {len(default)}: {s(d)} (then a {default_floor(det):g} s floor;"
                f" now {current_stall_floor():g} s)", "–", d <= 5)
    if faults:
        groups = faults["groups"].values()
        healthy = [g for g in groups if g["healthy"] and g["tool"] == "nvrx"]
        nvrx_faults = [g for g in groups if not g["healthy"] and g["tool"] == "nvrx"
                       and g["case"] != "mismatch"]
        anchors = [
            "none names the culprit live", "NVRx: its timeout + up to 5 s",
            "NCCL watchdog: 10 min (gloo: 30 min)",
            f"NVRx killed {sum(g['false_kills'] for g in healthy)} of"
            f" {sum(g['n'] for g in healthy)}",
            f"NVRx right in {sum(g['culprit_right'] for g in nvrx_faults)} of"
            f" {sum(g['n'] for g in nvrx_faults)} (2 ranks, no mismatch)",
        ]
        names = ["culprit named", "definitive faults ended", "every fault ended",
                 "healthy jobs killed", "culprit right"]
        for (goal, got, ok), anchor, name in zip(fault_goals(faults), anchors, names, strict=True):
            add(name, "fault-matrix-real-faults-healthy-stalls-shipped-defaults", goal, got,
                anchor, ok)
    if ft := res["torchft"]:
        for name, goal, got, anchor, ok in recovery_goals(ft):
            add(name, "recovery-without-restarting-healthy-ranks-torchft-replicas", goal, got,
                anchor, ok)
    if ft_ray := res["torchft_ray"]:
        for name, goal, got, anchor, ok in ray_survivor_goals(ft_ray):
            add(name, "recovery-without-restarting-healthy-ranks-torchft-replicas", goal, got,
                anchor, ok)
    for name, goal, got, anchor, ok in restart_goals(res["restart"], res["replicated"],
                                                     res["torchft"], res["restart_quiet"],
                                                     res["ray_restart"]):
        add(name, RESTART_ANCHOR, goal, got, anchor, ok)
    runs = job_scale(res)
    if runs["on"]:
        m = statistics.median(runs["on"])
        add("sidecar at job scale, telemetry on", "the-sidecars-cpu-at-job-scale-as-shipped",
            "≥ 20,000 reports per CPU-second, 1,000 ranks", f"{1e6 / m:,.0f} ({m:.1f} µs a report)",
            "NVRx: a monitor process per rank", 1e6 / m >= 20000)
    if rs := res["ray_sync"]:
        for phase, (got, ok) in ray_sync_goals(rs).items():
            add(f"Ray: a sidecar's sync, {phase}", RAY_SYNC_ANCHOR, "does not grow with the nodes",
                got, "before: every rank, every sync", ok)
    for name, label in (("scale", "direct streams"), ("scale_telemetry", "direct, telemetry on"),
                        ("scale_relay", "relayed, 100 ms batches"),
                        ("scale_relay_200ms", "relayed, 200 ms batches")):
        if r := res[name]:
            add(f"one sidecar, {label}", "one-sidecars-scale", "≥ 20,000 reports/s, p99 ≤ 200 ms",
                f"{r['max_sustained_per_s']:,.0f}/s sustained", "NVRx: a monitor process per rank",
                r["goal_met"])
    if gpu := res["sync_gpu"]:
        ratio = gpu["ratio_watched_over_plain"]
        add("GPU step time, watched", "step-time-on-a-gpu", "≤ 1.01× plain", f"{ratio:.4f}×",
            'NVRx straggler detection: "< 1 %"', ratio <= 1.01)
    for name, goal, got, anchor, ok in [
        *summary_sync_goals(res[SUMMARY_SYNC_AFTER]),
        *summary_sync_goals(res[SUMMARY_SYNC_HOST2], " (another host)"),
    ]:
        add(name, SUMMARY_SYNC_ANCHOR, goal, got, anchor, ok)
    sessions = "sessions-at-the-cap-bursts-2000-workers-at-10-hz"
    if rel := res["session_cost_relayed"]:
        peak = max(x["rss_bytes"] for x in rel["stages"]) / 1e6
        add("10,000 sessions, relayed", sessions, "RSS ≤ 150 MB", f"peak {peak:.0f} MB", "–",
            peak <= 150)
    if (ov := res["scale_overload_relay"]) and ov["levels"]:
        x = ov["levels"][0]
        p99 = x.get("lag_from_hook_p99_s", x["lag_p99_s"])
        add("2,000 workers at 10 Hz, relayed", sessions, "0 false incidents, verdict ≤ 5 s",
            f"{x['false_incidents']}; p99 {s(p99)}", "–", x["false_incidents"] == 0 and p99 <= 5)
    for name, goal, got, anchor, ok in starved_goals(res["starved"]):
        add(name, STARVED_ANCHOR, goal, got, anchor, ok)
    hardening = "hostile-input-kubelet-probes-the-ray-watcher"
    if fz := res["fuzz_soak"]:
        ok = fz["cases"] >= 20000 and fz["crashes"] == fz["false_kills"] == 0
        add("hostile streams", hardening, "≥ 20,000; 0 crashes, 0 false kills, RSS < 150 MB",
            f"{fz['cases']:,}; {fz['crashes']}, {fz['false_kills']}, max"
            f" {fz['rss_mb_max']:.0f} MB", "–", ok and fz["rss_mb_max"] < 150)
    if health := res["health"]:
        add("kubelet probe sees a kill", hardening, "≤ 1 s",
            f"median {health['latency_median_s']:.3f} s, max {health['latency_max_s']:.3f} s",
            "Ray Train health poll: 2 s", health["latency_max_s"] <= 1)
    if ray := res["ray_watch"]:
        add("Ray watcher, 100 actors", hardening, f"< {ray['goal_core_pct']:g} % of a core",
            f"{ray['watcher_core_pct']:.2f} %",
            "Ray Train: a hung health poll times out after 600 s",
            ray["watcher_core_pct"] < ray["goal_core_pct"])
    for name, goal, got, anchor, ok in incident_log_goals(res["incident_log"]):
        add(name, INCIDENT_LOG_ANCHOR, goal, got, anchor, ok)
    if inst := res["install"]:
        base = next(iter(inst["sizes"].values()))["net_of_empty_venv_mib"]
        add("sidecar-only install", "install-size", "≤ 100 MB", f"{base} MiB", "–",
            base * 2**20 <= 100e6)
    # fmt: on
    return out
