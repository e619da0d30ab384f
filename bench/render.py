"""docs/PERFORMANCE.md and its plots, rendered from the benchmarks' results.

    python bench/render.py                 # re-render from bench/results/*.json
    python bench/render.py --check         # exit 1 if docs/PERFORMANCE.md is stale
    python bench/render.py --results DIR --doc OUT.md --plots DIR

`make bench` runs the benchmarks (bench/run_all.py), then this. The whole
document is generated: every figure comes from a result file, which records
the command that produced it and the machine's load; a missing result file is
said so in the document, never filled in. The markdown does not depend on the
plots (tests/unit/test_bench_report.py renders it without matplotlib and
compares it with the committed file).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DOC = REPO / "docs" / "PERFORMANCE.md"
Result = dict[str, Any]
Lines = list[str]

TOOLS = {
    "tp_explicit": "trainprobe, explicit",
    "tp_auto": "trainprobe, auto",
    "tp_default": "trainprobe, shipped defaults",
    "tp_watch": "trainprobe + watch_ddp",
    "tp": "trainprobe",
    "nvrx": "NVRx",
    "gloo": "gloo timeout + torchrun",
}
HANGS = {"sleep": "sleep inside a step", "stop": "SIGSTOP", "skip": "missing from an allreduce"}
CASES = {
    "sleep": "sleep forever in the step",
    "stop": "SIGSTOP",
    "lock": "deadlock on a lock",
    "gil": "C call holding the GIL",
    "kill9": "killed -9, peers block",
    "skip": "missing from a collective",
    "mismatch": "mismatched collectives",
    "stall8": "one rank stalls 8 s (read)",
    "stall30": "one rank stalls 30 s (sleep)",
    "stall60": "one rank stalls 60 s (read)",
    "eval": "undeclared 40 s eval, collectives",
    "ckpt_phase": "40 s checkpoint in a phase",
    "ckpt_out": "40 s checkpoint, no phase",
    "compile60": "60 s compile warm-up",
    "slow2x": "one rank 2x slower",
    "sidecar_frozen": "sidecar frozen 30 s",
}
DEFINITIVE = ("stop", "kill9", "mismatch")
#: Results written before their benchmark recorded its command: the command as run.
COMMANDS = {"sync_gpu": "python bench/bench_sync_gpu.py --json bench/results/sync_gpu.json"}
#: Results merged from several runs, by the command they recorded: how to read it.
MERGED = {
    "python bench/bench_faults.py --tools tp_watch,tp --trials 10 --ranks 2,4 --parallel 14 (": (
        "python bench/bench_faults.py --parallel 14 --json bench/results/faults.json",
        "The committed result merges three runs of it: trainprobe (`--tools tp_watch,tp --trials"
        " 10 --ranks 2,4`), its eval and mismatch cases once more (`--cases eval,mismatch --seed"
        " 13`), the baselines (`--tools nvrx,gloo --baseline-trials 3 --ranks 2 --seed 14`);"
        " load average 20–56 during them.",
    )
}


# -- formatting ------------------------------------------------------------------


def s(x: float | None, unit: str = " s", digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return "never" if math.isinf(x) else f"{x:.{digits}f}{unit}"


def us(ns: float) -> str:
    u = ns / 1000
    return f"{u:.3f} µs" if u < 10 else f"{u:.1f} µs" if u < 100 else f"{u:.0f} µs"


def row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def head(*names: str) -> Lines:
    return [row(*names), "|" + " --- |" * len(names)]


def yes(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def command(r: Result, name: str) -> str:
    """The result's command, relative to the repository (results are often made
    in another checkout or written to /tmp first), writing to the committed file."""
    cmd = r.get("command") or COMMANDS.get(name, "")
    cmd = re.sub(r"(?<=\s)/\S*?/(?=(bench|docs)/)", "", cmd.replace(str(REPO) + "/", ""))
    return re.sub(r"(--(json|out)) \S+", rf"\1 bench/results/{name}.json", cmd)


def reproduce(r: Result, name: str) -> Lines:
    m = r.get("machine") or {
        "cpus": r.get("cpus"),
        "loadavg_at_start": [r.get("loadavg_1m_at_start")],
    }
    where = (
        r.get("device")
        or f"{m.get('cpus')} CPUs, load average {m['loadavg_at_start'][0]} at the start"
    )
    cmd, note = command(r, name), ""
    for recorded, (cmd_as_run, how) in MERGED.items():
        if (r.get("command") or "").startswith(recorded):
            cmd, note = cmd_as_run, f" {how}"
    return ["```bash", cmd, "```", "", f"<sub>Measured on {where}.{note}</sub>", ""]


def missing(name: str, cmd: str) -> Lines:
    return [f"*No result file `bench/results/{name}.json` yet: run `{cmd}`.*", ""]


def plot_ref(name: str, title: str) -> str:
    return f"![{title}](perf/{name}.png)"


# -- sections ------------------------------------------------------------------------


def cost_section(cost: Result | None, mem: Result | None) -> Lines:
    out = ["## Cost on the training thread", ""]
    if cost is None:
        return out + missing("cost", "python bench/bench_cost.py --json bench/results/cost.json")
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
        plot_ref("cost", "cost per call"),
        "",
        *reproduce(cost, "cost"),
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
    return [*out, "", plot_ref("hook_memory", "hook memory"), "", *reproduce(mem, "hook_memory")]


def detection_section(det: Result | None) -> Lines:
    out = ["## Detection and kill latency", ""]
    if det is None:
        return out + missing(
            "detection", "python bench/bench_detection.py --json bench/results/detection.json"
        )
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
        plot_ref("detection", "detection latency"),
        "",
        *reproduce(det, "detection"),
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


def _fault_groups(r: Result, healthy: bool) -> list[Result]:
    order, tools = {c: i for i, c in enumerate(CASES)}, {t: i for i, t in enumerate(TOOLS)}
    gs = [g for g in r["groups"].values() if g["healthy"] == healthy]
    return sorted(gs, key=lambda g: (order.get(g["case"], 99), g["ranks"], tools.get(g["tool"], 9)))


def _definitive_ok(t: Result) -> bool:
    whole = t["case"] == "kill9" or t.get("tie")
    x = t.get("all_dead_s") if whole else t.get("culprit_dead_s")
    return x is not None and x <= 5 and (t["culprit_right"] or bool(t.get("tie")))


def fault_goals(r: Result) -> list[tuple[str, str, bool]]:
    """(goal, measured, met) over trainprobe's trials at the shipped defaults."""
    tp = [t for t in r["trials"] if t["tool"] in ("tp", "tp_watch")]
    all_faults = [t for t in tp if not t["healthy"]]
    # A 2-rank mismatch is a tie: no tool can say which rank is wrong.
    faults = [t for t in all_faults if not t.get("tie")]
    ties = len(all_faults) - len(faults)
    named = sorted(t["named_s"] for t in faults if t.get("named_s") is not None)
    median = named[len(named) // 2] if named else None
    defin = [t for t in all_faults if t["case"] in DEFINITIVE]
    ok = sum(_definitive_ok(t) for t in defin)
    killed = sum(
        t.get("culprit_dead_s") is not None and t["culprit_dead_s"] <= 120 for t in all_faults
    )
    healthy = [t for t in tp if t["healthy"]]
    false = sum(t["false_kill"] for t in healthy)
    right = sum(t["culprit_right"] for t in faults)
    pct = right / len(faults) if faults else 0.0
    tie = f" ({ties} 2-rank mismatch ties apart)" if ties else ""
    return [
        (
            "culprit named ≤ 5 s after onset (median)",
            f"{s(median)} ({len(named)} of {len(faults)} trials named it){tie}",
            median is not None and median <= 5 and len(named) == len(faults),
        ),
        (
            "definitive faults (stop, kill -9, mismatch) ended ≤ 5 s",
            f"{ok} of {len(defin)}",
            ok == len(defin),
        ),
        (
            "every fault's culprit killed within 120 s",
            f"{killed} of {len(all_faults)}",
            killed == len(all_faults),
        ),
        ("0 false kills in healthy jobs", f"{false} in {len(healthy)} jobs", false == 0),
        (
            "culprit right in ≥ 95 % of fault trials",
            f"{right} of {len(faults)} ({pct:.0%}){tie}",
            pct >= 0.95,
        ),
    ]


def faults_section(r: Result | None) -> Lines:
    out = ["## Fault matrix: real faults, healthy stalls, shipped defaults", ""]
    if r is None:
        return out + missing(
            "faults", "python bench/bench_faults.py --json bench/results/faults.json"
        )
    p = r["params"]
    out += [
        f"{', '.join(str(x) for x in p['ranks'])}-rank gloo DDP jobs, 0.1 s steps; the event at a",
        "random step in 30..40 on a random rank. trainprobe as shipped: a sidecar with no flags,",
        "`LivenessProbeHook()`, with and without `hook.watch_ddp(model)`; NVRx and torchrun as",
        "above. *Named*: the first incident naming the culprit alone; *right*: the culprit died",
        "first (and was named); *where*: the incident said where it is stuck. Ambiguous evidence",
        "(a sleeping, locked or GIL-holding rank) is killed after `hang_patience_s` (auto, ≥ "
        "90 s);",
        "definitive evidence at once. A 2-rank mismatch is a tie: both ranks end, never *right*.",
        f"Jobs are cut {p['cap_s']:g} s after onset (*not killed*).",
        "",
        *head(
            "fault",
            "ranks",
            "tool",
            "n",
            "→ verdict",
            "→ named",
            "→ culprit dead, median / max",
            "→ job dead",
            "right",
            "where",
            "not killed",
        ),
    ]
    for g in _fault_groups(r, healthy=False):
        k, tp = g["culprit_dead_s"], g["tool"] in ("tp", "tp_watch")
        named = s(g["named_s"]["median"]) if tp else "n/a"
        where = (f"{g['where']}/{g['n']}" if "where" in g else "–") if tp else "n/a"
        tool = "gloo 5 s + torchrun" if g["tool"] == "gloo" else TOOLS[g["tool"]]
        out.append(
            row(
                CASES.get(g["case"], g["case"]),
                g["ranks"],
                tool,
                g["n"],
                s(g["verdict_s"]["median"]),
                named,
                f"{s(k['median'])} / {s(k['max'])}",
                s(g["all_dead_s"]["median"]),
                f"{g['culprit_right']}/{g['n']}",
                where,
                g["not_killed"],
            )
        )
    cols = sorted(
        {(g["tool"], g["ranks"]) for g in _fault_groups(r, healthy=True)},
        key=lambda c: (list(TOOLS).index(c[0]), c[1]),
    )
    out += [
        "",
        "Healthy jobs, which must finish: jobs killed of jobs run (hang verdicts given, no kill).",
        "",
        *head("healthy case", *(f"{TOOLS[t].split(' timeout')[0]}, {n} ranks" for t, n in cols)),
    ]
    cells: dict[str, dict[tuple[str, int], str]] = {}
    for g in _fault_groups(r, healthy=True):
        cells.setdefault(g["case"], {})[(g["tool"], g["ranks"])] = (
            f"{g['false_kills']}/{g['n']} ({g['verdicts']})"
        )
    for case, by in cells.items():
        out.append(row(CASES.get(case, case), *(by.get(c, "–") for c in cols)))
    out += ["", *head("goal (trainprobe, shipped defaults)", "measured", "")]
    out += [row(goal, got, yes(ok)) for goal, got, ok in fault_goals(r)]
    return [*out, "", plot_ref("faults", "fault matrix"), "", *reproduce(r, "faults")]


def scale_rows(r: Result) -> Lines:
    hook = any("lag_from_hook_p99_s" in x for x in r["levels"])
    cols = ["N", "sent/s", "processed/s", "CPU", "reports/CPU-s", "lag p50", "lag p99"]
    out = head(*cols, *(["p99 from hook"] if hook else []), "RSS", "per worker", "sustained")
    for x in r["levels"]:
        hook_cell = [s(x.get("lag_from_hook_p99_s", math.nan) * 1000, " ms", 0)] if hook else []
        out.append(
            row(
                f"{x['workers']:,}",
                f"{x['sent_per_s']:,.0f}",
                f"{x['processed_per_s']:,.0f}",
                f"{x['sidecar_cpu'] * 100:.0f}%",
                f"{x['reports_per_cpu_s']:,.0f}",
                s(x["lag_p50_s"] * 1000, " ms", 0),
                s(x["lag_p99_s"] * 1000, " ms", 0),
                *hook_cell,
                f"{x['rss_bytes'] / 2**20:.0f} MiB",
                f"{x['bytes_per_worker'] / 1024:.1f} KiB",
                "yes" if x["sustained"] else "no",
            )
        )
    for x in r.get("failed_levels", []):
        out.append(row(f"{x['workers']:,}", x["error"], *[""] * (len(cols) + hook + 1)))
    return out


def profile_line(r: Result) -> Lines:
    prof = r.get("profile")
    if not prof:
        return []
    parts = [f"`{k}` {v:.0%}" for k, v in prof["inclusive"].items() if v]
    top = [f"`{x['frame']}` {x['share']:.0%}" for x in prof["self_top"][:6]]
    return [
        f"Where the core went (py-spy at 100 Hz, N = {prof['workers']:,}, {prof['samples']} "
        "samples;"
        f" inclusive): {', '.join(parts)}. Own time: {'; '.join(top)}.",
        "",
    ]


def scale_section(res: dict[str, Result | None]) -> Lines:
    out = ["## One sidecar's scale", ""]
    scale, tele, path = res["scale"], res["scale_telemetry"], res["report_path"]
    if scale is None:
        return out + missing("scale", "python bench/bench_scale.py --json bench/results/scale.json")
    p = scale["params"]
    out += [
        "A fresh sidecar per N, pinned to one CPU, every action `observe`; load generators on",
        f"the other CPU simulate N ranks, a report every {1 / p['hz']:g} s each. *Lag*: a probe",
        "report → its HUNG verdict (tick every 100 ms). *Sustained*: ≥ 97% processed, p99 lag",
        "≤ 200 ms. Direct: one gRPC stream per rank, OpenTelemetry export off:",
        "",
        *scale_rows(scale),
        "",
        *profile_line(scale),
    ]
    if path:
        out += [
            f"Without the network ({path['workers']:,} workers): parse {path['parse_us']:.1f} "
            "µs, convert"
            f" {path['convert_us']:.1f} µs, `Registry.apply` {path['apply_us']:.1f} µs a "
            "report; a tick"
            f" {path['tick_ms']:.1f} ms (`{command(path, 'report_path')}`).",
            "",
        ]
    if tele:
        out += [
            f"Direct, telemetry on (`{command(tele, 'scale_telemetry')}`):",
            "",
            *scale_rows(tele),
            "",
        ]
        short = [
            x for x in tele["levels"] if x["sent_per_s"] < 0.9 * x["workers"] * tele["params"]["hz"]
        ]
        if short:
            out += [
                f"At N ≥ {short[0]['workers']:,} the load generators sent less than the ranks "
                "offer: they,"
                " not the sidecar, were the limit (see its reports per CPU-second; the job-scale"
                " section below measures the sidecar's CPU instead).",
                "",
            ]
        out += profile_line(tele)
    for name in ("scale_relay", "scale_relay_200ms"):
        r = res[name]
        if r is None:
            out += missing(name, "python bench/run_all.py --only " + name)
            continue
        ms = r.get("relay_interval_ms") or 1000 / r["params"]["hz"]
        out += [
            f"Relayed: node sidecars of {r['relay_workers_per_node']} workers send one `RelayBatch`"
            f" every {ms:g} ms (`{command(r, name)}`):",
            "",
            *scale_rows(r),
            "",
            *profile_line(r),
        ]
    return [*out, plot_ref("scale", "scale of one sidecar"), "", *reproduce(scale, "scale")]


def job_scale(res: dict[str, Result | None]) -> dict[str, list[float]]:
    """Sidecar CPU µs per report of each job-scale run, telemetry on and off."""
    runs: dict[str, list[float]] = {"on": [], "off": []}
    for t in runs:
        for i in range(1, 5):
            r = res.get(f"job_scale_{t}_r{i}")
            if r is not None:
                runs[t].append(r["levels"][0]["sidecar_cpu_us_per_report"])
    return runs


def job_scale_section(res: dict[str, Result | None]) -> Lines:
    out = ["## The sidecar's CPU at job scale, as shipped", ""]
    runs = job_scale(res)
    first = res.get("job_scale_on_r1")
    if first is None or not runs["off"]:
        return out + missing("job_scale_on_r1", "python bench/run_all.py --only job_scale")
    lv = first["levels"][0]
    out += [
        f"1,000 ranks behind node sidecars of {first['relay_workers_per_node']} workers (relay "
        "mode at",
        f"its default, a batch every {first['relay_interval_ms']:g} ms), 8 collective issue "
        "times a",
        "report; the upstream sidecar's CPU per report, telemetry on (the default) and off,",
        "in interleaved pairs:",
        "",
        *head("1,000 relayed ranks", "runs, µs a report", "median", "reports per CPU-second"),
    ]
    for t, label in (("on", "telemetry on (default)"), ("off", "telemetry off")):
        m = statistics.median(runs[t])
        out.append(
            row(label, ", ".join(f"{x:.1f}" for x in runs[t]), f"**{m:.1f} µs**", f"{1e6 / m:,.0f}")
        )
    ratio = statistics.median(runs["on"]) / statistics.median(runs["off"])
    out += [
        "",
        f"Telemetry on / off: {ratio:.2f}. Verdict lag p99 from receipt "
        f"{lv['lag_p99_s'] * 1000:.0f} ms"
        f" in the first run; spans exported per report {lv['spans_per_report']:.3f}.",
        "",
    ]
    fold = res.get("relay_fold")
    if fold:
        out += [
            f"What folding a batch's reports costs each node: {fold['us_per_report']:.1f} µs "
            "of node CPU a",
            f"hook report, {fold['core_share']:.2%} of a core for 8 workers at 10 Hz "
            f"(`{command(fold, 'relay_fold')}`).",
            "",
        ]
    return [
        *out,
        plot_ref("job_scale", "sidecar CPU per report"),
        "",
        *reproduce(first, "job_scale_on_r1"),
    ]


def gpu_section(r: Result | None) -> Lines:
    out = ["## Step time on a GPU", ""]
    if r is None:
        return out + missing("sync_gpu", COMMANDS["sync_gpu"])
    med = r["median_step_s"]
    out += [
        f"Two DDP models from the same weights ({r['model']}, {r['buckets_per_step']} buckets a",
        "step) alternate steps; one watched by `watch_ddp` and a hook streaming to a real sidecar",
        f"(CUDA events, the allocator and NVML read throughout), {r['steps_per_variant']} "
        "timed steps each.",
        "",
        *head("median step, plain", "watched", "ratio (median of paired ratios)", "goal"),
        row(
            f"{med['plain'] * 1000:.2f} ms",
            f"{med['watched'] * 1000:.2f} ms",
            f"**{r['ratio_watched_over_plain']:.4f}** ({r['median_paired_ratio']:.4f})",
            "≤ 1.01",
        ),
        "",
        f"The sidecar saw {r['sidecar_saw']['collectives_completed']} bucket allreduces complete.",
        "",
        plot_ref("sync_gpu", "GPU step time"),
        "",
    ]
    r = {**r, "device": f"1× {r['device']}, torch {r['torch']}, NCCL {r['nccl']}"}
    return out + reproduce(r, "sync_gpu")


def hardening_section(fz: Result | None, health: Result | None, ray: Result | None) -> Lines:
    out = ["## Hostile input, kubelet probes, the Ray watcher", ""]
    if fz is None:
        out += missing(
            "fuzz_soak", "python bench/bench_fuzz_soak.py --json bench/results/fuzz_soak.json"
        )
    else:
        st = fz["status_s"]
        out += [
            f"**Fuzz and soak.** {fz['cases']:,} hostile streams (Hypothesis, mutants, a 3.9 "
            "MB-label",
            "Hello every 200) against one sidecar with kill on, while a real gloo worker trains:",
            f"{fz['crashes']} crashes, {fz['false_kills']} false kills (the worker took "
            f"{fz['victim_steps_during']:,}",
            f"steps); `GetStatus` answered {fz['status_calls'] - fz['status_failed']} of "
            f"{fz['status_calls']}",
            f"(median {st['median'] * 1000:.0f} ms, p99 {st['p99'] * 1000:.0f} ms); RSS "
            f"{fz['rss_mb_start']:.0f} MB",
            f"at start, max {fz['rss_mb_max']:.0f} MB, {fz['last_quarter_mb_per_1000']:+.2f} "
            "MB per 1,000 streams in the last quarter.",
            "",
            plot_ref("fuzz_soak", "sidecar RSS under hostile streams"),
            "",
            *reproduce(fz, "fuzz_soak"),
        ]
    if health is None:
        out += missing("health", "python bench/bench_health.py --json bench/results/health.json")
    else:
        out += [
            "**Kubelet probe.** A `grpc.health.v1` probe polls every "
            f"{health['poll_ms']:g} ms while a worker hangs: NOT_SERVING reaches it a median",
            f"{health['latency_median_s']:.3f} s after the kill decision (max "
            f"{health['latency_max_s']:.3f} s"
            f" of {health['trials']}; includes one poll interval).",
            "",
            plot_ref("health", "probe latency"),
            "",
            *reproduce(health, "health"),
        ]
    if ray is None:
        return out + missing(
            "ray_watch", "python bench/bench_ray_watch.py --json bench/results/ray_watch.json"
        )
    return [
        *out,
        f"**Ray watcher.** With {ray['actors']} actors alive, snapshots every "
        f"{ray['interval_s']:g} s (median"
        f" {ray['snapshot_s_median']:.3f} s each) cost {ray['watcher_core_pct']:.2f}% of a "
        "core; the whole",
        f"watching process {ray['driver_core_pct']:.2f}%; findings on the healthy cluster: "
        f"{len(ray['findings'])}.",
        "",
        plot_ref("ray_watch", "Ray watcher CPU"),
        "",
        *reproduce(ray, "ray_watch"),
    ]


def install_section(r: Result | None) -> Lines:
    out = ["## Install size", ""]
    if r is None:
        return out + missing(
            "install", "python bench/bench_install.py --json bench/results/install.json"
        )
    out += [
        "Fresh venvs, this checkout's wheel; `du` of site-packages, and net of an empty venv",
        f"(pip and setuptools, {r['empty_venv_mib']} MiB). The hook and the sidecar are one "
        "distribution;",
        "neither installs torch (the hook uses the training process's own).",
        "",
        *head("install", "net of an empty venv", "site-packages", "torch / ray in it"),
    ]
    for name, x in r["sizes"].items():
        out.append(
            row(
                name,
                f"**{x['net_of_empty_venv_mib']} MiB**",
                f"{x['site_packages_mib']} MiB",
                ", ".join(re.findall(r"\w+", x["torch_or_ray_present"])) or "neither",
            )
        )
    return [*out, "", plot_ref("install", "install size"), "", *reproduce(r, "install")]


# -- the headline table ------------------------------------------------------------------


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
    runs = job_scale(res)
    if runs["on"]:
        m = statistics.median(runs["on"])
        add("sidecar at job scale, telemetry on", "the-sidecars-cpu-at-job-scale-as-shipped",
            "≥ 20,000 reports per CPU-second, 1,000 ranks", f"{1e6 / m:,.0f} ({m:.1f} µs a report)",
            "NVRx: a monitor process per rank", 1e6 / m >= 20000)
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
    if inst := res["install"]:
        base = next(iter(inst["sizes"].values()))["net_of_empty_venv_mib"]
        add("sidecar-only install", "install-size", "≤ 100 MB", f"{base} MiB", "–",
            base * 2**20 <= 100e6)
    # fmt: on
    return out


# -- the document and the plots ----------------------------------------------------------

NAMES = (
    "cost",
    "hook_memory",
    "detection",
    "faults",
    "scale",
    "scale_telemetry",
    "report_path",
    "scale_relay",
    "scale_relay_200ms",
    "relay_fold",
    "sync_gpu",
    "fuzz_soak",
    "health",
    "ray_watch",
    "install",
    *(f"job_scale_{t}_r{i}" for t in ("on", "off") for i in range(1, 5)),
)


def load(results: Path) -> dict[str, Result | None]:
    def one(name: str) -> Result | None:
        path = results / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    return {name: one(name) for name in NAMES}


def markdown(results: Path = RESULTS) -> str:
    res = load(results)
    lines = [
        "# Performance",
        "",
        "<!-- Generated by bench/render.py from bench/results/*.json: do not edit by hand. -->",
        "",
        "What trainprobe costs a training job and how fast it acts, next to the tools it is",
        "measured against: NVRx (nvidia-resiliency-ext 0.4.1, the newest on the package index",
        "here), torchelastic's timers, gloo's timeout under torchrun. Each figure below comes",
        "from a result file in `bench/results/`, with the command that reproduces it and the",
        "machine it ran on; medians and p99s, comparisons side by side in one run. Most ran on",
        "a 2-core VM shared with other work, so wall-clock figures carry its noise.",
        "",
        "`make bench` runs every benchmark and renders this page and its plots;",
        "`python bench/render.py` re-renders them from the results already there. How these",
        "figures were reached: [perf/HISTORY.md](perf/HISTORY.md).",
        "",
        "## Headline figures",
        "",
        *headlines(res),
        "",
        *cost_section(res["cost"], res["hook_memory"]),
        *detection_section(res["detection"]),
        *faults_section(res["faults"]),
        *scale_section(res),
        *job_scale_section(res),
        *gpu_section(res["sync_gpu"]),
        *hardening_section(res["fuzz_soak"], res["health"], res["ray_watch"]),
        *install_section(res["install"]),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def plots(results: Path, out: Path) -> list[Path]:
    """Every plot the document links that has its result; returns the files written."""
    import render_plots as rp

    res = load(results)
    out.mkdir(parents=True, exist_ok=True)
    makers: dict[str, Callable[[dict[str, Result | None], Path], bool]] = rp.MAKERS
    return [out / f"{n}.png" for n, make in makers.items() if make(res, out / f"{n}.png")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--doc", default=str(DOC))
    p.add_argument("--plots", default="", help="where the PNGs go (default: perf/ beside --doc)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--check", action="store_true", help="only say whether --doc is current")
    args = p.parse_args(argv)
    doc, results = Path(args.doc), Path(args.results)
    text = markdown(results)
    if args.check:
        current = doc.exists() and doc.read_text() == text
        print(f"{doc}: {'current' if current else 'stale: run python bench/render.py'}")
        return 0 if current else 1
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    written = (
        []
        if args.no_plots
        else plots(results, Path(args.plots) if args.plots else doc.parent / "perf")
    )
    print(f"wrote {doc} ({text.count(chr(10))} lines) and {len(written)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
