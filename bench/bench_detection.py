"""Detection latency: onset of a hang to its verdict and to the kill, tool by tool.

    python bench/bench_detection.py [--trials 20] [--kinds sleep,stop,skip]
        [--tools tp_explicit,tp_auto,nvrx,gloo] [--ranks 2] [--step-s 0.1]
        [--explicit-s 5] [--auto-floor-s 1] [--gloo-timeout-s 5]
        [--default-floor-waves 2] [--control-every 3] [--quick] [--json OUT]

Hangs (one rank of a 2-rank gloo DDP job with 100 ms steps, at a random step
in 30..40, the rank chosen at random):

- ``sleep``: the rank sleeps inside a step; its peer blocks in the allreduce;
- ``stop``: the rank SIGSTOPs itself;
- ``skip``: the rank misses the step's gradient allreduce and blocks in a recv
  no peer answers; its peer blocks in the allreduce it missed.

The run is a series of *waves*. A wave starts one job per tool with the same
kind of hang (see detect_jobs.py for how each tool runs), waits until every
rank of every job has started, then releases them together through a start
file, so that no start-up (torch import) competes with a detection window
inside the wave. The next wave starts once every job of this one has all its
ranks dead or passed its onset by ``--settle-s``; slower tools (torchrun
waiting 30 s to SIGKILL a stopped rank) finish in the background with no CPU
use of their own. Wave order: trial by trial, cycling through the kinds.

Extra jobs: ``tp_default`` (trainprobe's shipped defaults: auto threshold with
its 30 s floor) in the first ``--default-floor-waves`` waves, and a control
job (trainprobe auto, no hang, a declared 1.5 s checkpoint every 20 steps)
every ``--control-every`` waves. A false kill is a death or verdict before the
onset, or any verdict or unclean end of a control job.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.common import add_repo_to_path, summarize, write_result

add_repo_to_path()

from harness.detect_jobs import TP_TOOLS, Job, JobSpec  # noqa: E402

from tests.support import SidecarProcess  # noqa: E402

POLL_S = 0.02
EVENTS_EVERY = 5  # read progress files and verdicts every 5 polls (100 ms)


def start_sidecars(args: argparse.Namespace, root: Path) -> dict[str, SidecarProcess]:
    flags = {
        "tp_explicit": [
            "--stall-timeout-s",
            str(args.explicit_s),
            "--heartbeat-timeout-s",
            str(args.explicit_s),
        ],
        "tp_auto": ["--stall-floor-s", str(args.auto_floor_s)],
        "tp_default": [],
    }
    out = {}
    for tool, f in flags.items():
        if tool in args.tools or (tool == "tp_default" and args.default_floor_waves):
            d = root / tool
            d.mkdir()
            out[tool] = SidecarProcess(d, "--log-level", "warning", *f).start()
    if args.control_every and "tp_auto" not in out:
        d = root / "tp_auto"
        d.mkdir()
        out["tp_auto"] = SidecarProcess(d, "--stall-floor-s", str(args.auto_floor_s)).start()
    return out


def wave_specs(args: argparse.Namespace, wave: int, kind: str, rng: random.Random) -> list:
    def spec(tool: str, control: bool = False) -> JobSpec:
        return JobSpec(
            tool=tool,
            kind="control" if control else kind,
            ranks=args.ranks,
            hang_rank=rng.randrange(args.ranks),
            hang_at=rng.randint(30, 40),
            step_s=args.step_s,
            pg_timeout_s=args.gloo_timeout_s,
            control=control,
        )

    specs = [spec(t) for t in args.tools]
    if wave < args.default_floor_waves:
        specs.append(spec("tp_default"))
    if args.control_every and wave % args.control_every == 0:
        specs.append(spec("tp_auto", control=True))
    return specs


def settled(job: Job, now: float, settle_s: float, wave_deadline: float) -> bool:
    if job.spec.control:
        return job.all_dead or now > wave_deadline
    if job.all_dead:
        return True
    return (job.onset is not None and now - job.onset > settle_s) or now > wave_deadline


def finished(job: Job, now: float, cap_s: float, deadline: float) -> bool:
    if job.all_dead:
        return True
    return (job.onset is not None and now - job.onset > cap_s) or now > deadline


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="tpdet-", dir="/tmp"))
    sidecars = start_sidecars(args, root)
    results: list[dict[str, Any]] = []
    lingering: list[tuple[Job, float]] = []  # (job, hard deadline)
    tick = 0

    def poll(jobs: list[Job]) -> None:
        nonlocal tick
        tick += 1
        now = time.time()
        for j in jobs:
            j.poll_deaths(now)
            if tick % EVENTS_EVERY == 0:
                j.poll_events()

    def retire(now: float) -> None:
        for item in list(lingering):
            job, deadline = item
            if finished(job, now, args.cap_s, deadline):
                job.poll_events()
                job.stop()
                results.append({"wave": job.extra.pop("wave"), **job.result()})
                lingering.remove(item)
                print(f"  {results[-1]}", flush=True)

    waves = [(t, k) for t in range(args.trials) for k in args.kinds]
    try:
        for w, (_, kind) in enumerate(waves):
            wdir = root / f"w{w:03d}"
            wdir.mkdir()
            start_file = wdir / "go"
            jobs = []
            for i, spec in enumerate(wave_specs(args, w, kind, rng)):
                job = Job(spec, wdir, f"w{w:03d}-{i}-{spec.tool}", start_file)
                job.sidecar = sidecars.get(spec.tool)
                job.extra["wave"] = w
                job.launch()
                jobs.append(job)
            print(f"wave {w} ({kind}): {[j.spec.tool for j in jobs]}", flush=True)
            ready_by = time.time() + 180
            while not all(j.ready() for j in jobs):
                if time.time() > ready_by:
                    raise RuntimeError(f"wave {w}: jobs did not start: {[j.job_id for j in jobs]}")
                poll([j for j, _ in lingering])
                retire(time.time())
                time.sleep(0.1)
            start_file.touch()
            wave_deadline = time.time() + 60
            for j in jobs:
                lingering.append((j, time.time() + args.cap_s + 60))
            while not all(settled(j, time.time(), args.settle_s, wave_deadline) for j in jobs):
                poll([j for j, _ in lingering])
                retire(time.time())
                time.sleep(POLL_S)
        while lingering:
            poll([j for j, _ in lingering])
            retire(time.time())
            time.sleep(POLL_S)
    finally:
        for job, _ in lingering:
            job.stop()
        for sc in sidecars.values():
            sc.stop()
    return results


def summarize_results(results: list[dict[str, Any]], args: argparse.Namespace) -> dict:
    groups: dict[str, dict[str, Any]] = {}
    for r in results:
        if r["control"]:
            continue
        key = f"{r['tool']}/{r['kind']}"
        g = groups.setdefault(key, {"tool": r["tool"], "kind": r["kind"], "trials": []})
        g["trials"].append(r)
    out = {}
    for key, g in groups.items():
        trials = g.pop("trials")
        g["n"] = len(trials)
        for field in ("verdict_s", "culprit_dead_s", "all_dead_s"):
            g[field] = summarize([t[field] for t in trials if t[field] is not None])
        g["not_killed"] = sum(1 for t in trials if t["culprit_dead_s"] is None)
        g["false_kills"] = sum(1 for t in trials if t["false_kill"])
        thresholds = [t.get("threshold_s") or t.get("nvrx_subsequent_timeout_s") for t in trials]
        g["threshold_s"] = summarize([x for x in thresholds if x is not None])
        out[key] = g
    controls = [r for r in results if r["control"]]
    return {
        "groups": out,
        "controls": len(controls),
        "control_false_kills": sum(1 for r in controls if r["false_kill"]),
        "false_kills": sum(1 for r in results if r["false_kill"]),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--kinds", default="sleep,stop,skip")
    p.add_argument("--tools", default="tp_explicit,tp_auto,nvrx,gloo")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--step-s", type=float, default=0.1)
    p.add_argument("--explicit-s", type=float, default=5.0)
    p.add_argument("--auto-floor-s", type=float, default=1.0)
    p.add_argument("--gloo-timeout-s", type=float, default=5.0)
    p.add_argument("--default-floor-waves", type=int, default=2)
    p.add_argument("--control-every", type=int, default=3)
    p.add_argument("--settle-s", type=float, default=15.0)
    p.add_argument("--cap-s", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="1 trial per kind, no tp_default")
    p.add_argument("--json", default="")
    args = p.parse_args()
    args.kinds = args.kinds.split(",")
    args.tools = args.tools.split(",")
    if args.quick:
        args.trials, args.default_floor_waves = min(args.trials, 1), 0
    unknown = set(args.tools) - {*TP_TOOLS, "nvrx", "gloo"}
    if unknown:
        p.error(f"unknown tools: {sorted(unknown)}")
    started = time.monotonic()
    results = run(args)
    summary = summarize_results(results, args)
    for key, g in sorted(summary["groups"].items()):
        v, k = g["verdict_s"], g["culprit_dead_s"]
        print(
            f"{key:22} n={g['n']:2} verdict median {v['median']:.3f} max {v['max']:.3f} | "
            f"culprit dead median {k['median']:.3f} max {k['max']:.3f} | "
            f"not killed {g['not_killed']} false kills {g['false_kills']}"
        )
    print(f"controls {summary['controls']}, false kills overall {summary['false_kills']}")
    if args.json:
        params = {k: v for k, v in vars(args).items() if k != "json"}
        write_result(
            args.json, "detection", {"params": params, **summary, "trials": results}, started
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
