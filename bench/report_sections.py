"""Markdown for each benchmark's section of docs/PERFORMANCE.md, and the goals table."""

from __future__ import annotations

import math
import re
from typing import Any

from _common import REPO, fmt_us

KIND_TEXT = {
    "sleep": "sleep inside a step",
    "stop": "SIGSTOP",
    "skip": "missing from an allreduce",
}
TOOL_TEXT = {
    "tp_explicit": "trainprobe, explicit",
    "tp_auto": "trainprobe, auto",
    "tp_default": "trainprobe, shipped defaults",
    "nvrx": "NVRx, calculated timeouts",
    "gloo": "gloo timeout + torchrun",
}


def s(x: float | None, unit: str = " s", digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "never"
    return f"{x:.{digits}f}{unit}"


def table_head(*names: str) -> list[str]:
    return ["| " + " | ".join(names) + " |", "|" + " --- |" * len(names)]


def yes(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def repo_relative(command: str) -> str:
    """A result's command with this checkout's paths, or another worktree's
    (results are often produced in one), shown relative to the repository."""
    return re.sub(r"/\S*?/(?=(bench|docs)/)", "", command.replace(str(REPO) + "/", ""))


def provenance(r: dict[str, Any]) -> str:
    m = r["machine"]
    command = repo_relative(r["command"])
    return (
        f"`{command}` — finished {r['finished_at']}, took {r['wall_s']:.0f} s; "
        f"{m['cpus']} CPUs, load average {m['loadavg_at_start'][0]} at start"
    )


def goals(
    cost: dict | None,
    det: dict | None,
    scale: dict | None,
    mem: dict | None,
    tele: dict | None = None,
) -> list[str]:
    out = ["## Goals of issue 7", "", "| goal | measured | |", "| --- | --- | --- |"]
    if cost:
        b, p = cost["modes"]["back_to_back"]["nvrx"], cost["modes"]["paced"]["nvrx"]
        out.append(
            f"| `on_step_end` ≥ 50× cheaper than NVRx `send_heartbeat` | "
            f"{b['ratio_median']:.0f}× (back-to-back), {p['ratio_median']:.0f}× (paced), "
            f"at the median | {yes(cost['goal_met'])} |"
        )
    if det:
        auto = [t for t in det["trials"] if t["tool"] == "tp_auto" and not t["control"]]
        worst = max((t["culprit_dead_s"] or math.inf) for t in auto) if auto else math.nan
        job = max((t["all_dead_s"] or math.inf) for t in auto) if auto else math.nan
        floor = det["params"]["auto_floor_s"]
        out.append(
            f"| a hang in a 100 ms-step job detected and killed within 5 s under auto "
            f"thresholds | worst of {len(auto)} hangs: hung rank killed after {s(worst)}, "
            f"whole job after {s(job)} (auto, floor {floor:g} s) | {yes(worst <= 5.0)} |"
        )
        default = [t for t in det["trials"] if t["tool"] == "tp_default"]
        if default:
            d = max((t["culprit_dead_s"] or math.inf) for t in default)
            out.append(
                f"| (the same with the shipped defaults: auto, 30 s floor) | worst of "
                f"{len(default)}: {s(d)} | {yes(d <= 5.0)} |"
            )
        jobs = len(det["trials"])
        out.append(
            f"| no false kill across the whole benchmark | {det['false_kills']} false kills in "
            f"{jobs} jobs ({det['controls']} of them controls with declared checkpoints) | "
            f"{yes(det['false_kills'] == 0)} |"
        )
    if scale:
        busiest = max(scale["levels"], key=lambda row: row["processed_per_s"])
        out.append(
            f"| one sidecar ≥ 20,000 reports/s on one core (p99 report→verdict ≤ 200 ms) | "
            f"{scale['max_sustained_per_s']:,.0f} reports/s sustained "
            f"({scale['max_sustained_per_s'] / scale['goal_per_s']:.0%} of the goal); at the "
            f"busiest level {busiest['reports_per_cpu_s']:,.0f} reports per CPU-second | "
            f"{yes(scale['goal_met'])} |"
        )
    if tele:
        out.append(
            f"| (the same with OpenTelemetry export on, as shipped) | "
            f"{tele['max_sustained_per_s']:,.0f} reports/s sustained "
            f"({tele['max_sustained_per_s'] / tele['goal_per_s']:.0%} of the goal) | "
            f"{yes(tele['goal_met'])} |"
        )
    if mem:
        out.append(
            f"| hook RSS growth after {mem['steps']:,} steps (≤ 2 MiB) | "
            f"{mem['rss_growth_bytes'] / 2**20:.2f} MiB | {yes(mem['goal_met'])} |"
        )
        if pc := mem.get("per_call"):
            out.append(
                f"| (issue 2) `on_step_end` median ≤ 1 µs and p99 ≤ 5 µs, reporter at 10 Hz | "
                f"median {pc['net_median_ns'] / 1000:.2f} µs, p99 {pc['net_p99_ns'] / 1000:.2f}"
                f" µs, each of {pc['calls']:,} calls timed alone | {yes(pc['goal_met'])} |"
            )
    return [*out, ""]


def cost_section(r: dict[str, Any]) -> list[str]:
    out = [
        "## Cost on the training thread, per step",
        "",
        provenance(r),
        "",
        "One process, real servers for every tool (a trainprobe sidecar process with the",
        "reporter streaming at 10 Hz, an NVRx 0.4.1 RankMonitorServer process, a torchelastic",
        "FileTimerServer process), every call timed alone; net = minus the median of an empty",
        f"call. *Back-to-back*: blocks of {r['block']} consecutive calls per candidate, rotating",
        f"({r['rounds']} rounds). *Paced*: one call of each after a {r['pace_ms']:g} ms sleep",
        f"({r['iterations']} iterations): every server idles in between, as in real training;",
        "on this machine (a nested VM) any call after a sleep pays a few µs of wake-up.",
        "",
        *table_head(
            "candidate",
            "back-to-back median",
            "p99",
            "paced median",
            "p99",
            "÷ trainprobe (median, back-to-back / paced)",
        ),
    ]
    names = {
        "trainprobe": "trainprobe `on_step_end`",
        "nvrx": "NVRx `send_heartbeat()`",
        "elastic": "torchelastic `with expires(after=60):`",
        "elastic_scoped": 'torchelastic `expires(after=60, scope="step")`',
    }
    for key, label in names.items():
        b, p = r["modes"]["back_to_back"][key], r["modes"]["paced"][key]
        ratio = "1×"
        if "ratio_median" in b:
            ratio = f"{b['ratio_median']:.0f}× / {p['ratio_median']:.0f}×"
        errors = b["errors"] + p["errors"]
        note = f" ({errors} calls raised BlockingIOError)" if errors else ""
        out.append(
            f"| {label}{note} | {fmt_us(b['net_ns']['median'])} | {fmt_us(b['net_ns']['p99'])} "
            f"| {fmt_us(p['net_ns']['median'])} | {fmt_us(p['net_ns']['p99'])} | {ratio} |"
        )
    burst = r["elastic_burst"]
    batch = r["batch_ns_per_call"]
    out += [
        "",
        "- `on_step_end` in batches of 1,000 calls (no per-call timer): "
        f"{batch['trainprobe']:.0f} ns per call; an empty call: {batch['bare']:.0f} ns.",
        f"- torchelastic's FileTimerServer drains its named pipe once a second: back-to-back "
        f"`expires()` calls failed with {burst['error'] or 'no error'} after "
        f"{burst['calls_before_error']} calls (≈{burst['calls_per_s']:,.0f} calls/s until then), "
        "so a loop faster than a few hundred steps per second cannot use it.",
        "- The reply-less heartbeats of newer NVRx releases could not be measured: 0.4.1 is the",
        "  newest nvidia-resiliency-ext on the package index this machine reaches.",
        "",
        "![cost per call](perf/cost.png)",
        "",
    ]
    return out


def detection_section(r: dict[str, Any]) -> list[str]:
    p = r["params"]
    out = [
        "## Detection latency",
        "",
        provenance(r),
        "",
        f"{p['ranks']}-rank gloo DDP jobs (`tests/workers/ddp_worker.py`) with "
        f"{p['step_s'] * 1000:.0f} ms steps; one rank hangs at a random step in 30..40",
        "(sleep inside the step; SIGSTOP; or it",
        "misses the step's gradient allreduce and blocks in a recv, so its peer waits in the",
        "allreduce). Each wave runs one job per tool with the same kind of hang, released",
        "together after every rank has started (see `bench/bench_detection.py`). Onset = the",
        "time the rank logged just before hanging; *verdict* = the tool's own record (trainprobe",
        'incident, NVRx rank monitor\'s "FT timeout elapsed" log line, the first gloo exception);',
        "*killed* = the hung rank's pid gone (polled every 20 ms).",
        "",
        f"- trainprobe explicit: `--stall-timeout-s {p['explicit_s']:g} --heartbeat-timeout-s "
        f"{p['explicit_s']:g}`; auto: `--stall-floor-s {p['auto_floor_s']:g}` (threshold",
        "  max(floor, 10 × p99 step time) after 20 steps, heartbeat 10 s); shipped defaults:",
        "  auto with its 30 s floor. Kill = SIGCONT + SIGTERM from the sidecar.",
        "- NVRx: `ft_launcher --standalone --nproc-per-node 2 --max-restarts 0` with its default",
        "  config (check every 5 s, SIGKILL); each rank heartbeats after every step and calls",
        "  `calculate_and_set_hb_timeouts()` after step 20 (5 × the largest interval,",
        "  all-reduced).",
        "- gloo: `torchrun --standalone --nproc-per-node 2 --max-restarts 0`, process group",
        f"  timeout {p['gloo_timeout_s']:g} s (torch's default is 30 min); torchrun tears the job",
        "  down once a rank exits, SIGTERM then SIGKILL 30 s later.",
        "",
        *table_head(
            "hang",
            "tool",
            "n",
            "threshold (median)",
            "onset → verdict, median / max",
            "onset → hung rank killed, median / max",
            "whole job dead, median / max",
            "not killed",
            "false kills",
        ),
    ]
    groups = r["groups"]
    for kind in p["kinds"]:
        for tool in TOOL_TEXT:
            g = groups.get(f"{tool}/{kind}")
            if g is None:
                continue
            v, k, a = g["verdict_s"], g["culprit_dead_s"], g["all_dead_s"]
            threshold = p["gloo_timeout_s"] if tool == "gloo" else g["threshold_s"]["median"]
            out.append(
                f"| {KIND_TEXT.get(kind, kind)} | {TOOL_TEXT[tool]} | {g['n']} | "
                f"{s(threshold)} | {s(v['median'])} / {s(v['max'])} | "
                f"{s(k['median'])} / {s(k['max'])} | {s(a['median'])} / {s(a['max'])} | "
                f"{g['not_killed']} | {g['false_kills']} |"
            )
    out += [
        "",
        f"Controls (trainprobe auto, no hang, a declared 1.5 s checkpoint every 20 steps): "
        f"{r['controls']}, false kills {r['control_false_kills']}.",
        "",
        "![detection latency](perf/detection.png)",
        "",
    ]
    return out


def profile_lines(r: dict[str, Any], path: dict[str, Any] | None) -> list[str]:
    """Where the sidecar's core goes: the py-spy profile and the no-network stages."""
    out: list[str] = []
    prof = r.get("profile")
    if prof:
        lvl = prof["level"]
        inc = prof["inclusive"]
        out += [
            f"Where the core goes (py-spy, 100 Hz, over the window of one more run at "
            f"N = {prof['workers']:,}: {lvl['processed_per_s']:,.0f} reports/s, sidecar CPU "
            f"{lvl['sidecar_cpu'] * 100:.0f}%; shares of {prof['samples']} samples, gRPC's C "
            "code is billed to the Python line that awaits it):",
            "",
            f"- inclusive: the report stream loop `SidecarServicer._read` "
            f"{inc['SidecarServicer._read']:.0%}, of which `Registry.apply` "
            f"{inc['Registry.apply']:.0%} (`validate_report` {inc['validate_report']:.0%}, "
            f"`p99` {inc['p99']:.0%}) and `convert.report_from_pb` {inc['report_from_pb']:.0%}; "
            f"the rules tick `Engine.tick` {inc['Engine.tick']:.0%}"
            + (
                f"; OpenTelemetry: `Telemetry.on_report` {inc['Telemetry.on_report']:.0%} and "
                f"the span export thread {inc['BatchProcessor.worker']:.0%}."
                if inc.get("Telemetry.on_report")
                else "."
            ),
            "- top frames by own time: "
            + "; ".join(f"`{x['frame']}` {x['share']:.0%}" for x in prof["self_top"][:6])
            + ".",
            "",
        ]
    if path:
        out += [
            "The same Python work without the network "
            f"(`{repo_relative(path['command'])}`, "
            f"{path['workers']:,} workers, best of {path['repeats']}): per report "
            f"parse {path['parse_us']:.1f} µs, convert {path['convert_us']:.1f} µs, "
            f"`Registry.apply` {path['apply_us']:.1f} µs (together {path['per_report_us']:.1f} µs);"
            f" a rules tick over all workers {path['tick_ms']:.1f} ms "
            f"({path['tick_core_share']:.0%} of a core at 10 ticks/s). Without gRPC this code "
            f"alone would cap one core at about {path['python_ceiling_per_s']:,.0f} reports/s.",
            "",
        ]
    return out


def scale_rows(r: dict[str, Any]) -> list[str]:
    """The scale table; relayed results add the lag from the hook's making of the probe."""
    hook = any("lag_from_hook_p99_s" in row for row in r["levels"])
    cols = ["N", "sent/s", "processed/s", "sidecar CPU", "reports per CPU-s"]
    cols += ["lag p50", "lag p99", *(["lag p99 from hook (incl. node batching)"] if hook else [])]
    out = table_head(*cols, "RSS", "per worker", "sustained")
    for row in r["levels"]:
        from_hook = row.get("lag_from_hook_p99_s", math.nan) * 1000
        out.append(
            f"| {row['workers']:,} | {row['sent_per_s']:,.0f} | {row['processed_per_s']:,.0f} | "
            f"{row['sidecar_cpu'] * 100:.0f}% | {row['reports_per_cpu_s']:,.0f} | "
            f"{s(row['lag_p50_s'] * 1000, ' ms', 0)} | "
            f"{s(row['lag_p99_s'] * 1000, ' ms', 0)} | "
            + (f"{s(from_hook, ' ms', 0)} | " if hook else "")
            + f"{row['rss_bytes'] / 2**20:.0f} MiB | "
            f"{row['bytes_per_worker'] / 1024:.1f} KiB | {'yes' if row['sustained'] else 'no'} |"
        )
    for row in r.get("failed_levels", []):
        out.append(f"| {row['workers']:,} | {row['error']} |" + " |" * (len(cols) + 1))
    return out


def scale_section(
    r: dict[str, Any], path: dict[str, Any] | None = None, tele: dict[str, Any] | None = None
) -> list[str]:
    p = r["params"]
    out = [
        "## Scale of one sidecar",
        "",
        provenance(r),
        "",
        f"A fresh sidecar per N, pinned to CPU {r['sidecar_cpus'][0]} (all its threads), every",
        "action `observe`; `bench/loadgen.py` processes pinned to the other CPU simulate N ranks",
        f"of one job, one gRPC stream each over a Unix socket, a report every {1 / p['hz']:g} s",
        f"with {r['steps_per_report']} steps. Window {p['duration']:g} s after a {p['warmup']:g} s "
        "warm-up. Lag = probe report sent → its HUNG incident (tick every 100 ms). A level is",
        "sustained when the sidecar processed ≥ 97% of what was sent with p99 lag ≤ 200 ms.",
        f"OpenTelemetry export {p['telemetry']} (the liveness path alone):",
        "",
        *scale_rows(r),
        "",
        *profile_lines(r, path),
    ]
    if tele is not None:
        out += [
            "The sidecar as shipped, OpenTelemetry export on (spans and metrics as OTLP-JSON",
            f"lines in its state directory): {provenance(tele)}",
            "",
            *scale_rows(tele),
            "",
            *profile_lines(tele, None),
        ]
    return [*out, "![scale of one sidecar](perf/scale.png)", ""]


def memory_section(r: dict[str, Any]) -> list[str]:
    return [
        "## Hook memory",
        "",
        provenance(r),
        "",
        "RSS of a process holding a `LivenessProbeHook` (reporting at 10 Hz to a real sidecar)",
        f"after {r['steps']:,} `on_step_end` calls over {r['seconds']:g} s ({r['reports_sent']}"
        f" reports sent): growth {r['rss_growth_bytes'] / 2**20:.2f} MiB from the sample after",
        f"10,000 warm-up steps. Batches of 1,000 calls: {r['batch_ns_per_call_median']:.0f} ns per"
        f" call (an empty call: {r['bare_ns_per_call_median']:.0f} ns).",
        "",
        *_per_call_lines(r.get("per_call")),
        "![hook memory](perf/hook_memory.png)",
        "",
    ]


def _per_call_lines(pc: dict[str, Any] | None) -> list[str]:
    if not pc:
        return []
    return [
        "",
        f"Issue 2's goal, in the same process with the reporter still sending at 10 Hz: "
        f"{pc['calls']:,} calls each timed alone (alternating with a timed empty call; net ="
        f" minus the empty call's median, {pc['timer_ns']:.0f} ns): **median "
        f"{pc['net_median_ns']:.0f} ns, p99 {pc['net_p99_ns']:.0f} ns** (goal ≤ 1,000 and"
        f" ≤ 5,000 ns: {'met' if pc['goal_met'] else 'missed'}; the empty call's p99:"
        f" {pc['bare_p99_ns']:.0f} ns).",
        "",
    ]
