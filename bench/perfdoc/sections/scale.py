"""One sidecar's scale, and its CPU at job scale behind node sidecars."""

from __future__ import annotations

import math
import statistics

from ..core import Lines, Result, closing, command, head, missing, plot_ref, reproduce, row, s


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
        return out + missing("scale")
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
    return [*out, *closing(scale, "scale", "scale of one sidecar")]


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
