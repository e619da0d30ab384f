"""Detection and kill latency: one hang a job, every tool side by side."""

from __future__ import annotations

import sys

from ..core import HANGS, REPO, TOOLS, Lines, Result, closing, head, missing, row, s


def detection_section(det: Result | None) -> Lines:
    out = ["## Detection and kill latency", ""]
    if det is None:
        return out + missing("detection")
    p = det["params"]
    out += [
        f"{p['ranks']}-rank gloo DDP jobs, {p['step_s'] * 1000:.0f} ms steps; one rank hangs "
        "at a random",
        "step in 30..40 (sleeps in the step, is SIGSTOPped, or misses the gradient allreduce so",
        "its peer waits in it). Each wave runs one job per tool with the same hang. *Verdict*:",
        "the tool's own record; *killed*: the hung rank's pid gone (polled every 20 ms).",
        f"trainprobe explicit: `--stall-timeout-s {p['explicit_s']:g}`; auto: `--stall-floor-s",
        f"{p['auto_floor_s']:g}` (max(floor, 10 × p99 step time)); shipped defaults: a sidecar",
        "with no flags.",
        "NVRx: `ft_launcher`, default config, `calculate_and_set_hb_timeouts()` after step 20.",
        f"gloo: `torchrun`, process-group timeout {p['gloo_timeout_s']:g} s (torch's default: "
        "30 min).",
        "",
        *head(
            "hang",
            "tool",
            "n",
            "threshold",
            "→ verdict, median / max",
            "→ hung rank killed, median / max",
            "→ job dead, median / max",
            "not killed",
            "false kills",
        ),
    ]
    for kind in p["kinds"]:
        for tool in ("tp_explicit", "tp_auto", "tp_default", "nvrx", "gloo"):
            g = det["groups"].get(f"{tool}/{kind}")
            if g is None:
                continue
            v, k, a = g["verdict_s"], g["culprit_dead_s"], g["all_dead_s"]
            threshold = p["gloo_timeout_s"] if tool == "gloo" else g["threshold_s"]["median"]
            label = "NVRx, calculated timeouts" if tool == "nvrx" else TOOLS[tool]
            out.append(
                row(
                    HANGS.get(kind, kind),
                    label,
                    g["n"],
                    s(threshold),
                    f"{s(v['median'])} / {s(v['max'])}",
                    f"{s(k['median'])} / {s(k['max'])}",
                    f"{s(a['median'])} / {s(a['max'])}",
                    g["not_killed"],
                    g["false_kills"],
                )
            )
    jobs = len(det["trials"])
    then, now = default_floor(det), current_stall_floor()
    if then is not None and now is not None and then != now:
        out += [
            "",
            f"The shipped defaults of this run stalled {then:g} s before a verdict; today's"
            f" floor is {now:g} s, with ambiguous hangs killed after `hang_patience_s`: the fault"
            " matrix below measures today's defaults.",
        ]
    out += [
        "",
        f"False kills: {det['false_kills']} in {jobs} jobs, {det['controls']} of them controls",
        f"with a declared 1.5 s checkpoint every 20 steps ({det['control_false_kills']} of "
        "them killed).",
        "",
        *closing(det, "detection", "detection latency"),
    ]
    return out


def default_floor(det: Result) -> float | None:
    """The stall threshold the shipped-defaults jobs of a detection run had."""
    g = det["groups"].get("tp_default/sleep")
    return g["threshold_s"]["median"] if g else None


def current_stall_floor() -> float | None:
    """The stall floor this checkout ships (None if the sidecar does not import)."""
    for d in ("proto", "hooks", "sidecar"):
        if str(REPO / d) not in sys.path:
            sys.path.append(str(REPO / d))
    try:
        from trainprobe.sidecar.config.settings import Settings
    except ImportError:
        return None
    return float(Settings().stall_floor_s)
