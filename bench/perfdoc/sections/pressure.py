"""The sidecar and its tools under pressure: a starved sidecar that must not act on its
own lateness, and a large incident log read in bounded memory."""

from __future__ import annotations

import re

from ..core import Lines, Result, head, missing, reproduce, row, s, yes

__all__ = [
    "INCIDENT_LOG_ANCHOR",
    "STARVED_ANCHOR",
    "incident_log_goals",
    "incident_log_section",
    "starved_goals",
    "starved_section",
]

STARVED_ANCHOR = "a-starved-sidecar-2000-workers-at-10-hz-on-2-cores"
INCIDENT_LOG_ANCHOR = "reading-a-large-incident-log"
LOG_GOAL_MB = 200.0


def _this(r: Result) -> Result | None:
    """The run of this checkout's sidecar (a result may hold another checkout's run first)."""
    runs = [x for x in r["runs"] if x.get("sidecar_src") in (None, "", "this checkout")]
    return runs[-1] if runs else None


def starved_goals(r: Result | None) -> list[tuple[str, str, str, str, bool]]:
    if r is None or (x := _this(r)) is None:
        return []
    p = r["params"]
    return [(
        f"starved sidecar, {p['workers']:,} workers at {p['hz']:g} Hz on 2 cores",
        f"0 false incidents, 0 healthy ranks signalled (patience {p['hang_patience_s']} s)",
        f"{x['false_incidents']}, {x['healthy_workers_signalled']}", "–",
        x["false_incidents"] == 0 and x["healthy_workers_signalled"] == 0,
    )]  # fmt: skip


def starved_section(r: Result | None) -> Lines:
    out = ["## A starved sidecar: 2,000 workers at 10 Hz on 2 cores", ""]
    if r is None or (x := _this(r)) is None:
        return out + missing("starved")
    p = r["params"]
    busy = {0: "", 1: " beside a busy loop"}.get(p["hogs"], f" beside {p['hogs']} busy loops")
    ok = x["false_incidents"] == 0 and x["healthy_workers_signalled"] == 0
    cells = ("false incidents", "healthy ranks signalled", "real ranks' steps", "sidecar CPU")
    out += [
        f"One sidecar, shipped rules, kill on, `--hang-patience-s {p['hang_patience_s']}` (a"
        f" verdict acts at once); {p['workers']:,}",
        f"simulated workers of one job at {p['hz']:g} Hz over direct streams (telemetry"
        f" {p['telemetry']}) and {p['real_workers']} real gloo",
        f"ranks of another, all pinned to CPUs {p['cpus']}{busy}: the sidecar falls far"
        " behind, and no",
        "worker ever hangs, so every incident in the window is false.",
        "",
        *head(*cells, "goal", ""),
        row(
            f"**{x['false_incidents']}** in {s(x['window_s'], ' s', 0)}",
            f"**{x['healthy_workers_signalled']}**",
            " / ".join(str(n) for n in x["real_worker_steps_in_window"]),
            f"{x['sidecar_cpu'] * 100:.0f} % of a core",
            "0 and 0",
            yes(ok),
        ),
        "",
        f"Incidents as the load generators exit at the end: {x['teardown_incidents']} (not"
        " false: their streams do end).",
        "Whether a starved run shows false incidents varies from run to run (bench/HISTORY.md).",
        "",
    ]
    cmd = re.sub(r" --before-src \S+", "", r.get("command") or "")
    m = r.get("machine") or {}
    where = f"CPUs {p['cpus']} of a {m.get('cpus')}-CPU machine, load average"
    where += f" {(m.get('loadavg_at_start') or ['?'])[0]} at the start"
    return out + reproduce({**r, "command": cmd, "device": where}, "starved")


def _log_runs(r: Result) -> list[tuple[str, float]]:
    return [(name, x["peak_rss_mb"]) for name, x in r["runs"].items() if x["exit"] == 0]


def incident_log_goals(r: Result | None) -> list[tuple[str, str, str, str, bool]]:
    if r is None:
        return []
    runs, ok = _log_runs(r), all(x["exit"] == 0 for x in r["runs"].values())
    peak = max((mb for _, mb in runs), default=float("inf"))
    return [(
        f"{r['log_mb'] / 1024:g} GB incident log read", f"peak RSS ≤ {LOG_GOAL_MB:g} MB",
        f"max {peak:.0f} MB of {len(r['runs'])} commands", "–", ok and peak <= LOG_GOAL_MB,
    )]  # fmt: skip


def incident_log_section(r: Result | None) -> Lines:
    out = ["## Reading a large incident log", ""]
    if r is None:
        return out + missing("incident_log")
    out += [
        "`trainprobe incidents` and `report` stream the incident log, so their memory must not"
        " grow",
        f"with it: a {r['log_mb']:,} MB log of sidecar-like records ({r['incidents']:,}"
        " incidents: an incident, a",
        "decision and an action record each), read by each command in its own process; the peak",
        "RSS is the kernel's (`wait4`).",
        "",
        *head("command", "peak RSS", "goal", ""),
    ]
    for name, x in r["runs"].items():
        ok = x["exit"] == 0 and x["peak_rss_mb"] <= LOG_GOAL_MB
        exit_ = "" if x["exit"] == 0 else f" (exit {x['exit']})"
        out.append(row(f"`trainprobe {name}`", f"**{x['peak_rss_mb']:g} MB**{exit_}",
                       f"≤ {LOG_GOAL_MB:g} MB", yes(ok)))  # fmt: skip
    # Results from before the bench wrote its own file: `--json` printed them.
    cmd = re.sub(r"^nice -n \d+ ", "", r.get("command") or "")
    cmd += " bench/results/incident_log.json" if cmd.endswith("--json") else ""
    where = r.get("device") or (
        None if r.get("machine") else "a " + (r.get("note") or "").split(":")[0]
    )
    return [*out, "", *reproduce({**r, "command": cmd, "device": where}, "incident_log")]
