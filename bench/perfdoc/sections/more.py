"""The remaining sections: step time on a GPU, hostile input and probes, install size."""

from __future__ import annotations

import re

from ..core import COMMANDS, Lines, Result, closing, head, missing, row


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
    ]
    r = {**r, "device": f"1× {r['device']}, torch {r['torch']}, NCCL {r['nccl']}"}
    return out + closing(r, "sync_gpu", "GPU step time")


def hardening_section(fz: Result | None, health: Result | None, ray: Result | None) -> Lines:
    out = ["## Hostile input, kubelet probes, the Ray watcher", ""]
    if fz is None:
        out += missing("fuzz_soak")
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
            *closing(fz, "fuzz_soak", "sidecar RSS under hostile streams"),
        ]
    if health is None:
        out += missing("health")
    else:
        out += [
            "**Kubelet probe.** A `grpc.health.v1` probe polls every "
            f"{health['poll_ms']:g} ms while a worker hangs: NOT_SERVING reaches it a median",
            f"{health['latency_median_s']:.3f} s after the kill decision (max "
            f"{health['latency_max_s']:.3f} s"
            f" of {health['trials']}; includes one poll interval).",
            "",
            *closing(health, "health", "probe latency"),
        ]
    if ray is None:
        return out + missing("ray_watch")
    return [
        *out,
        f"**Ray watcher.** With {ray['actors']} actors alive, snapshots every "
        f"{ray['interval_s']:g} s (median"
        f" {ray['snapshot_s_median']:.3f} s each) cost {ray['watcher_core_pct']:.2f}% of a "
        "core; the whole",
        f"watching process {ray['driver_core_pct']:.2f}%; findings on the healthy cluster: "
        f"{len(ray['findings'])}.",
        "",
        *closing(ray, "ray_watch", "Ray watcher CPU"),
    ]


def install_section(r: Result | None) -> Lines:
    out = ["## Install size", ""]
    if r is None:
        return out + missing("install")
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
    return [*out, "", *closing(r, "install", "install size")]
