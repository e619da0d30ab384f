"""The fault matrix: every fault and healthy case of issue 12, tool by tool.

    python bench/bench_faults.py [--trials 10] [--baseline-trials 3] [--ranks 2,4]
        [--cases all|sleep,stop,...] [--tools tp_watch,tp,nvrx,gloo] [--parallel 6]
        [--cap-s 150] [--quick] [--json OUT]

Cases (bench/harness/fault_worker.py): 7 faults (sleep, stop, lock, gil, kill9,
skip, mismatch) where one rank never comes back, and 9 healthy cases
(stall8, stall30, stall60, eval, ckpt_phase, ckpt_out, compile60, slow2x,
sidecar_frozen) where the job must finish. Each runs with 2 and 4 gloo ranks,
0.1 s steps, the event at a random step in 30..40 on a random rank (rank 0
for the checkpoints), under each tool (fault_jobs.py): trainprobe with and
without ``watch_ddp`` under the shipped defaults (sidecar without flags, hook
interval 1 s), NVRx 0.4.1's ft_launcher, torchrun with a 5 s gloo timeout.
``sidecar_frozen`` is trainprobe's own case (its sidecar, one per job,
SIGSTOPped for 30 s once the job is past its event step).

Jobs run ``--parallel`` at a time from one shuffled queue; each job's ranks
wait for its own start file, touched once all of them are up. A fault job
ends when all its ranks are gone or ``--cap-s`` after onset; a healthy job
when its ranks have exited, or its expected length plus ``--cap-s``.

Per case: time from onset to a verdict and to a verdict naming the culprit
(trainprobe), to the culprit's death and the whole job's, whether the
culprit was right (first to die and, for trainprobe, named), false kills.

Length: the case lengths are the issue's (stalls of 8, 30 and 60 s, a 60 s
warm-up, a 30 s freeze; eval and checkpoints of 40 s, past the 30 s stall
floor) and each job steps only ~3 s before and after its event, so a job's
wall time is mostly its event, its detection and its ranks' start-up (torch
import). ``--quick`` is 1 trial of every case with 2 ranks for all four tools:
62 jobs, 934 s at ``--parallel 6`` on the shared 2-core development machine
(load average 59). The default full run (10 trials per case for trainprobe
with and without watch_ddp, 2 and 4 ranks; 3 for NVRx and torchrun) is 820
jobs: about 3.5 h at that pace, so it does not fit in an hour on 2 cores.
``--trials 3 --baseline-trials 1`` (252 jobs) is about one hour there.
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

from harness.fault_jobs import FREEZE_S, TP, FaultJob, FaultSpec  # noqa: E402
from harness.fault_worker import EVENT_S, FAULTS, HEALTHY  # noqa: E402

from tests.support import SidecarProcess  # noqa: E402

POLL_S = 0.05


def job_specs(args: argparse.Namespace, rng: random.Random) -> list[FaultSpec]:
    specs = []
    for ranks in args.ranks:
        for case in args.cases:
            for tool in args.tools:
                if case == "sidecar_frozen" and tool not in TP:
                    continue
                n = args.trials if tool in TP else args.baseline_trials
                for _ in range(n):
                    healthy = case in HEALTHY
                    at = rng.randint(30, 40)
                    steps = 100000
                    if healthy:
                        steps = at + (100 if case == "slow2x" else 30)
                    if case == "sidecar_frozen":  # still stepping 15 s after the thaw
                        steps = at + 30 + int((FREEZE_S + 15) / 0.1)
                    specs.append(
                        FaultSpec(
                            tool=tool,
                            kind=case,
                            ranks=ranks,
                            hang_rank=0 if case.startswith("ckpt") else rng.randrange(ranks),
                            hang_at=at,
                            step_s=0.1,
                            pg_timeout_s=args.gloo_timeout_s,
                            healthy=healthy,
                            steps=steps,
                        )
                    )
    rng.shuffle(specs)
    return specs


def expected_s(spec: FaultSpec) -> float:
    """How long a healthy job should run once started (a generous estimate)."""
    base = spec.steps * spec.step_s * (2 if spec.kind == "slow2x" else 1)
    return base + EVENT_S.get(spec.kind, 0) + (FREEZE_S if spec.kind == "sidecar_frozen" else 0)


class Runner:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.shared: SidecarProcess | None = None
        self.results: list[dict[str, Any]] = []
        self.n = 0

    def sidecar_for(self, spec: FaultSpec, wdir: Path) -> SidecarProcess | None:
        if spec.tool not in TP:
            return None
        if spec.kind == "sidecar_frozen":  # its own: the freeze must not touch other jobs
            return SidecarProcess(wdir, "--log-level", "warning").start()
        if self.shared is None:
            d = self.root / "sidecar"
            d.mkdir()
            self.shared = SidecarProcess(d, "--log-level", "warning").start()
        return self.shared

    def start(self, spec: FaultSpec) -> dict[str, Any]:
        self.n += 1
        wdir = self.root / f"j{self.n:04d}"
        wdir.mkdir()
        job = FaultJob(spec, wdir, f"j{self.n:04d}-{spec.tool}-{spec.kind}", wdir / "go")
        job.sidecar = self.sidecar_for(spec, wdir)
        job.launch()
        return {"job": job, "started": time.time(), "go": None, "deadline": None}

    def step(self, s: dict[str, Any], now: float) -> bool:
        """Advance one job; True once it is over (its result recorded)."""
        job: FaultJob = s["job"]
        spec = job.spec
        if s["go"] is None:
            if job.ready():
                job.start_file.touch()
                s["go"] = now
                cap = self.args.cap_s
                s["deadline"] = now + (expected_s(spec) + cap if spec.healthy else 60 + cap)
            elif now - s["started"] > 300:
                return self.finish(s, "did not start")
            return False
        job.poll_deaths(now)
        job.poll_events()
        if spec.kind == "sidecar_frozen":
            frozen_at = job.extra.get("frozen_at")
            if frozen_at is None and job.extra.get("max_step", 0) >= spec.hang_at:
                job.freeze_sidecar(now)
            elif (
                frozen_at is not None and "thawed" not in job.extra and now - frozen_at >= FREEZE_S
            ):
                job.thaw_sidecar()
        exited = len(job.dead_at) == spec.ranks
        if spec.healthy and exited:
            return self.finish(s)
        if not spec.healthy and (exited or (job.onset and now - job.onset > self.args.cap_s)):
            return self.finish(s)
        if now > s["deadline"]:
            return self.finish(s, "deadline")
        return False

    def safe_step(self, s: dict[str, Any], now: float) -> bool:
        try:
            return self.step(s, now)
        except Exception as err:  # one broken job must not end the run
            return self.finish(s, f"harness error: {err!r}")

    def finish(self, s: dict[str, Any], why: str = "") -> bool:
        job: FaultJob = s["job"]
        job.poll_events()
        if job.spec.kind == "sidecar_frozen":
            job.thaw_sidecar()
        job.stop()
        r = job.result()
        if why:
            r["ended"] = why
        self.results.append(r)
        if job.spec.kind == "sidecar_frozen" and job.sidecar is not None:
            job.sidecar.stop()
        print(f"  [{len(self.results)}] {r}", flush=True)
        return True

    def run(self, specs: list[FaultSpec]) -> list[dict[str, Any]]:
        queue, live = list(specs), []
        try:
            while queue or live:
                while queue and len(live) < self.args.parallel:
                    live.append(self.start(queue.pop(0)))
                now = time.time()
                live = [s for s in live if not self.safe_step(s, now)]
                time.sleep(POLL_S)
        finally:
            for s in live:
                job = s["job"]
                job.stop()
                if job.spec.kind == "sidecar_frozen" and job.sidecar is not None:
                    job.thaw_sidecar()
                    job.sidecar.stop()
            if self.shared is not None:
                self.shared.stop()
        return self.results


def summarize_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for r in results:
        key = f"{r['tool']}/{r['ranks']}/{r['case']}"
        groups.setdefault(key, {"tool": r["tool"], "ranks": r["ranks"], "case": r["case"]})
        groups[key].setdefault("trials", []).append(r)
    out = {}
    for key, g in groups.items():
        trials = g.pop("trials")
        g["n"] = len(trials)
        g["healthy"] = trials[0]["healthy"]
        g["false_kills"] = sum(1 for t in trials if t["false_kill"])
        if g["healthy"]:
            g["verdicts"] = sum(t["verdicts"] for t in trials)
        else:
            for f in ("verdict_s", "named_s", "culprit_dead_s", "all_dead_s"):
                g[f] = summarize([t[f] for t in trials if t.get(f) is not None])
            g["culprit_right"] = sum(1 for t in trials if t["culprit_right"])
            g["where"] = sum(1 for t in trials if t.get("where"))
            g["not_killed"] = sum(1 for t in trials if t["all_dead_s"] is None)
        out[key] = g
    healthy = [r for r in results if r["healthy"]]
    faults = [r for r in results if not r["healthy"]]
    return {
        "groups": out,
        "healthy_jobs": len(healthy),
        "healthy_false_kills": sum(1 for r in healthy if r["false_kill"]),
        "fault_jobs": len(faults),
        "culprit_right": sum(1 for r in faults if r["culprit_right"]),
        # Without the ties no tool can break (2-rank mismatch: see fault_jobs.py).
        "nameable_fault_jobs": sum(1 for r in faults if not r.get("tie")),
        "culprit_right_nameable": sum(1 for r in faults if r["culprit_right"] and not r.get("tie")),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--baseline-trials", type=int, default=3)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--cases", default="all")
    p.add_argument("--tools", default="tp_watch,tp,nvrx,gloo")
    p.add_argument("--parallel", type=int, default=6)
    p.add_argument("--gloo-timeout-s", type=float, default=5.0)
    p.add_argument("--cap-s", type=float, default=150.0)
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--quick", action="store_true", help="1 trial per case and tool, 2 ranks")
    p.add_argument("--json", default="")
    args = p.parse_args()
    args.cases = [*FAULTS, *HEALTHY] if args.cases == "all" else args.cases.split(",")
    args.tools = args.tools.split(",")
    args.ranks = [int(x) for x in args.ranks.split(",")]
    if args.quick:
        args.trials, args.baseline_trials, args.ranks = 1, 1, [2]
    unknown = set(args.cases) - {*FAULTS, *HEALTHY} | set(args.tools) - {*TP, "nvrx", "gloo"}
    if unknown:
        p.error(f"unknown cases or tools: {sorted(unknown)}")
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="tpfault-", dir="/tmp"))
    specs = job_specs(args, random.Random(args.seed))
    print(f"{len(specs)} jobs, {args.parallel} at a time, in {root}", flush=True)
    results = Runner(args, root).run(specs)
    summary = summarize_results(results)
    for key, g in sorted(summary["groups"].items()):
        if g["healthy"]:
            print(f"{key:28} n={g['n']:2} false kills {g['false_kills']} verdicts {g['verdicts']}")
        else:
            v, k = g["named_s"], g["culprit_dead_s"]
            print(
                f"{key:28} n={g['n']:2} named median {v['median']:.2f} | culprit dead median "
                f"{k['median']:.2f} | right {g['culprit_right']}/{g['n']} "
                f"not killed {g['not_killed']} false kills {g['false_kills']}"
            )
    print(f"healthy jobs {summary['healthy_jobs']}, false kills {summary['healthy_false_kills']}")
    if args.json:
        params = {k: v for k, v in vars(args).items() if k != "json"}
        write_result(args.json, "faults", {"params": params, **summary, "trials": results}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
