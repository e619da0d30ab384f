"""The cost on the training thread: every tool's per-step call, and the hook alone."""

from __future__ import annotations

from ..core import Lines, Result, closing, head, missing, row, us


def cost_section(cost: Result | None, mem: Result | None) -> Lines:
    out = ["## Cost on the training thread", ""]
    if cost is None:
        return out + missing("cost")
    out += [
        "Every tool's per-step call against its real server (a trainprobe sidecar with the",
        "reporter streaming at 10 Hz, an NVRx RankMonitorServer, a torchelastic FileTimerServer),",
        "each call timed alone, net of an empty call. *Back-to-back*: blocks of",
        f"{cost['block']} calls per tool, rotating ({cost['rounds']} rounds). *Paced*: one "
        "call of each",
        f"after a {cost['pace_ms']:g} ms sleep ({cost['iterations']} times), as in training "
        "(any call",
        "after a sleep pays the wake-up).",
        "",
        *head("call", "back-to-back median", "p99", "paced median", "p99", "÷ trainprobe"),
    ]
    names = {
        "trainprobe": "trainprobe `on_step_end`",
        "nvrx": "NVRx `send_heartbeat()`",
        "elastic": "torchelastic `with expires(after=60):`",
        "elastic_scoped": 'torchelastic `expires(after=60, scope="step")`',
    }
    for key, label in names.items():
        b, p = cost["modes"]["back_to_back"][key], cost["modes"]["paced"][key]
        ratio = (
            f"{b['ratio_median']:.0f}× / {p['ratio_median']:.0f}×" if "ratio_median" in b else "1×"
        )
        errors = b["errors"] + p["errors"]
        note = f" ({errors} calls raised BlockingIOError)" if errors else ""
        out.append(
            row(
                f"{label}{note}",
                us(b["net_ns"]["median"]),
                us(b["net_ns"]["p99"]),
                us(p["net_ns"]["median"]),
                us(p["net_ns"]["p99"]),
                ratio,
            )
        )
    burst, batch = cost["elastic_burst"], cost["batch_ns_per_call"]
    out += [
        "",
        f"`on_step_end` in batches of 1,000 calls: {batch['trainprobe']:.0f} ns a call (an "
        "empty call"
        f" {batch['bare']:.0f} ns).",
        "torchelastic's server drains its pipe once a second: back-to-back `expires()` failed",
        f"with {burst['error'] or 'no error'} after {burst['calls_before_error']} calls. NVRx's",
        "newer reply-less heartbeats could not be measured: 0.4.1 is the newest here.",
        "",
        *closing(cost, "cost", "cost per call"),
    ]
    if mem is None:
        return out + missing(
            "hook_memory", "python bench/bench_hook.py --json bench/results/hook_memory.json"
        )
    pc = mem.get("per_call") or {}
    out += [
        "### The hook alone, and its memory",
        "",
        "One process with a `LivenessProbeHook` reporting at 10 Hz to a real sidecar:",
        f"{mem['steps']:,} `on_step_end` calls over {mem['seconds']:g} s grow its RSS by",
        f"**{mem['rss_growth_bytes'] / 2**20:.2f} MiB**; in batches of 1,000 a call costs",
        f"{mem['batch_ns_per_call_median']:.0f} ns (an empty call "
        f"{mem['bare_ns_per_call_median']:.0f} ns).",
    ]
    if pc:
        out += [
            f"Each of {pc['calls']:,} calls timed alone, net of an empty call: **median",
            f"{pc['net_median_ns']:.0f} ns, p99 {pc['net_p99_ns']:.0f} ns**.",
        ]
    return [*out, "", *closing(mem, "hook_memory", "hook memory")]
