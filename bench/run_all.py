"""Run every benchmark, then render docs/PERFORMANCE.md and its plots from the results.

    python bench/run_all.py            # make bench: full runs, results in bench/results/
    python bench/run_all.py --quick    # make bench-quick: smoke test in a temporary
                                       # directory; docs/PERFORMANCE.md is not touched
    python bench/run_all.py --only cost,job_scale   # a subset (full runs), then the page
    python bench/render.py             # only the page, from the results already there

Each benchmark runs in its own process and writes its result file (with the
command that produced it and the machine's load); bench/render.py then renders
the page and plots from every result file. The benchmarks that no figure of the
page comes from (``EXTRA``, most of them in bench/probes/) run too, and
only print their tables. The order puts the CPU-sensitive measurements first,
while the machine is quietest, and the long detection, fault-matrix and
recovery (restart, replicas) benchmarks last. The GPU figure
(``sync_gpu``) needs a GPU machine: run ``bench/bench_sync_gpu.py --json
bench/results/sync_gpu.json`` there; the restarts' quiet-machine rows
(``restart_quiet``) need a quiet one: ``bench/bench_restart.py --modes stop``
there (its result records how it was run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.common import REPO, RESULTS

HERE = Path(__file__).resolve().parent
#: 1,000 ranks behind relay nodes of 8 at the shipped relay interval, with 8
#: collective issue times a report: the sidecar's CPU per report, on and off.
JOB_SCALE = [
    *("--relay-workers-per-node", "8", "--workers", "1000", "--issue-times", "8"),
    *("--duration", "8", "--warmup", "3", "--profile-workers", "0"),
]
#: (result name, script, arguments, arguments in --quick mode instead of --quick)
BENCHES: list[tuple[str, str, list[str], list[str] | None]] = [
    ("report_path", "bench_report_path.py", [], []),
    # Four interleaved telemetry on/off pairs: the page quotes their medians.
    *(
        (f"job_scale_{t}_r{i}", "bench_scale.py", ["--telemetry", t, *JOB_SCALE], [])
        for i in range(1, 5)
        for t in ("on", "off")
    ),
    ("scale", "bench_scale.py", [], []),
    (
        "scale_telemetry",
        "bench_scale.py",
        ["--telemetry", "on", "--workers", "100,250,500,1000", "--profile-workers", "250"],
        [],
    ),
    # Simulated relay nodes of 8 workers, one batch every 100 ms, to one upstream.
    (
        "scale_relay",
        "bench_scale.py",
        [
            *("--relay-workers-per-node", "8", "--relay-interval-ms", "100"),
            *("--workers", "1000,1500,1750,2000,2500", "--profile-workers", "2000"),
        ],
        [],
    ),
    (
        "scale_relay_200ms",
        "bench_scale.py",
        [
            *("--relay-workers-per-node", "8", "--relay-interval-ms", "200"),
            *("--workers", "2000,2250,2500", "--profile-workers", "0"),
        ],
        [],
    ),
    ("relay_fold", "bench_relay_fold.py", [], ["--repeats", "1", "--batches", "50"]),
    ("cost", "bench_cost.py", [], []),
    ("hook_memory", "bench_hook.py", [], []),
    ("install", "bench_install.py", ["--no-torch"], ["--no-torch"]),
    ("health", "bench_health.py", ["--trials", "10"], ["--trials", "2"]),
    ("ray_watch", "bench_ray_watch.py", ["--actors", "100", "--seconds", "40"], None),
    ("fuzz_soak", "bench_fuzz_soak.py", [], []),
    *(
        (
            f"session_cost{name}",
            "bench_session_cost.py",
            ["--streams", "10000", "--connections", "200", "--settle-s", "3", *extra],
            ["--streams", "400", "--connections", "20", "--settle-s", "1"],
        )
        for name, extra in (
            ("", []),
            ("_relayed", ["--relayed", "8"]),
            ("_relayed_off", ["--relayed", "8", "--telemetry", "off"]),
        )
    ),
    # 2,000 workers at 10 Hz and 2 real gloo ranks, the sidecar pinned with them
    # to 2 cores beside a busy loop, patience 0: false incidents, ranks signalled.
    (
        "starved",
        "bench_starved.py",
        [
            *("--workers", "2000", "--cpus", "0,1", "--generators", "2", "--real-workers", "2"),
            *("--duration", "45", "--hogs", "1", "--hang-patience-s", "0"),
        ],
        ["--workers", "200", "--duration", "10"],
    ),
    # Summary mode: one upstream (pinned to a CPU) fed by simulated nodes' JobSync
    # streams, its steady state and an incident. The 100,000-rank size needs 16 cores:
    # --nodes 12500 --procs 14 --window-s 30 --incident on such a machine.
    (
        "summary_sync",
        "bench_summary_sync.py",
        ["--nodes", "100,500,2000", "--window-s", "10", "--incident"],
        ["--nodes", "10", "--window-s", "2", "--settle-s", "12", "--incident"],
    ),
    # A 1 GB incident log read by incidents --json, incidents and report (--quick: 64 MB).
    ("incident_log", "bench_incident_log.py", ["--mb", "1024"], []),
    ("detection", "bench_detection.py", [], []),
    ("faults", "bench_faults.py", ["--parallel", "14"], []),
    # The replicated loop under trainprobe run: survivors and the evicted group
    # after a SIGSTOP and a sleep, step time replicated vs plain DDP at 1 s and
    # 100 ms steps (about 6 minutes a trial).
    (
        "replicated",
        "bench_replicated.py",
        ["--trials", "3"],
        ["--trials", "1", "--faults", "stop", "--step-times", "0.1", "--steptime-s", "5"],
    ),
    # Every stack (plain script, HF, Lightning) under torchrun --max-restarts
    # comes back after the kill: 10 SIGSTOP and 2 sleeping-rank trials a stack
    # at shipped defaults (the sleeps wait out the 90 s patience): about 45
    # minutes on a 2-core machine.
    (
        "restart",
        "bench_restart.py",
        ["--modes", "sleep,stop", "--trials", "10", "--sleep-trials", "2"],
        ["--stacks", "plain", "--modes", "stop", "--trials", "1"],
    ),
    # torchft replicas (docs/DEPLOY.md's way): faults, healthy stalls, Ray
    # Train's replacement and the non-replicated restarts; the same under 10
    # busy loops; Ray Train's survivors with both lighthouses (hours: not --quick).
    ("torchft", "bench_torchft.py", ["--trials", "3"], None),
    (
        "torchft_loaded",
        "bench_torchft.py",
        [
            *("--sections", "faults,healthy", "--faults", "sleep,stop", "--modes", "trainprobe"),
            *("--healthy", "stall8", "--trials", "3", "--burn", "10"),
        ],
        None,
    ),
    (
        "torchft_ray",
        "bench_torchft.py",
        [
            *("--sections", "ray", "--ray-faults", "stop,sleep"),
            *("--ray-lighthouse", "trainprobe,ray", "--ray-shape", "by-hand", "--trials", "3"),
        ],
        None,
    ),
    # Four replica groups, one SIGSTOPped: trainprobe run (about 1.5 minutes a trial)
    # and Ray Train's one-liner (minutes a trial); Ray Train's restarted group hanging
    # before its first step (about 2 minutes a trial).
    (
        "replicated_4groups",
        "bench_replicated.py",
        ["--sections", "faults", "--faults", "stop", "--groups", "4", "--trials", "3"],
        ["--trials", "1"],
    ),
    (
        "torchft_ray_4groups",
        "bench_torchft.py",
        ["--sections", "ray", "--ray-faults", "stop", "--ray-groups", "4", "--trials", "3"],
        None,
    ),
    ("ray_startup", "bench_ray_startup.py", ["--trials", "3"], None),
    # Ray Train's restart of every rank after a SIGSTOP (and a sleep: its phases, the
    # 90 s patience), no replicas: about 1 minute a SIGSTOP trial, 2.5 a sleeping one.
    (
        "ray_restart",
        "bench_torchft.py",
        [
            *("--sections", "restart", "--restart-stacks", "ray_train"),
            *("--restart-hangs", "stop,sleep", "--trials", "3"),
        ],
        [
            *("--sections", "restart", "--restart-stacks", "ray_train"),
            *("--restart-hangs", "stop", "--trials", "1"),
        ],
    ),
]
#: Scripts whose result file is named by another flag than --json.
OUT_FLAG = {"bench_torchft.py": "--out"}
#: Benchmarks that no figure of the page comes from: run (not in --quick), printed.
#: Paths are relative to bench/; the probes among them live in bench/probes/.
EXTRA = [
    ["probes/bench_sidecar_otel.py", "--rounds", "7"],
    ["probes/bench_sidecar_otel.py", "--encoder"],
    ["probes/bench_culprit.py", "--trials", "5", "--mode", "sleep", "--watch-ddp"],
    ["probes/bench_culprit.py", "--trials", "3", "--mode", "stop", "--watch-ddp"],
    ["probes/bench_arrival.py", "--workers", "1000", "--collectives", "8"],
    *(["probes/bench_sidecar_cpu.py", "--telemetry", t] for t in ("on", "off")),
    ["probes/bench_grpc_relay.py", "--parse"],
    ["probes/bench_otel_export.py"],
    # Issue 21: what a session costs, by structure and as the process's RSS at
    # the 10,000-session cap, over churn rounds and after close (goal <= 150 MB).
    ["session_structures.py", "--json", "bench/results/session_structures.json"],
    ["probes/bench_sessions.py", "--json", "bench/results/sessions.json"],
    # Issue 21: 2,000 workers at 10 Hz over direct streams, as shipped (telemetry
    # on): false incidents, reports shed, and the probes' time to a verdict.
    [
        "bench_scale.py",
        *("--telemetry", "on", "--workers", "2000", "--hz", "10"),
        *("--duration", "30", "--profile-workers", "0"),
        *("--json", "bench/results/scale_overload.json"),
    ],
    ["probes/speed_probe.py"],
    # Issue 38: what the Ray job sync sends each sidecar, 10 to 12,500 nodes of 8
    # ranks, before (every other rank) and after (a digest, deltas while needed).
    ["bench_ray_sync.py", "--json", "bench/results/ray_sync.json"],
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="", help="comma-separated result names (job_scale: all 8)")
    args = p.parse_args()
    wanted = set(args.only.split(",")) if args.only else None

    def picked(name: str) -> bool:
        group = "job_scale" if name.startswith("job_scale_") else name
        return wanted is None or name in wanted or group in wanted

    results = Path(tempfile.mkdtemp(prefix="tpbench-")) if args.quick else RESULTS
    results.mkdir(parents=True, exist_ok=True)
    failed = []
    for name, script, argv, quick in BENCHES:
        if not picked(name) or (args.quick and quick is None):
            continue
        out = results / f"{name}.json"
        shown = out.relative_to(REPO) if out.is_relative_to(REPO) else out
        cmd = [
            sys.executable,
            str(HERE / script),
            *argv,
            OUT_FLAG.get(script, "--json"),
            str(shown),
        ]
        if args.quick:
            cmd += quick or ["--quick"]
        print(f"\n### {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.run(cmd, cwd=REPO).returncode
        print(f"### {name}: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
    if not args.quick and wanted is None:
        for argv in EXTRA:
            print(f"\n### python bench/{' '.join(argv)}", flush=True)
            if subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]]).returncode:
                failed.append(argv[0])
    render = [sys.executable, str(HERE / "render.py"), "--results", str(results)]
    if args.quick:
        render += ["--doc", str(results / "PERFORMANCE.md")]
    failed += [] if subprocess.run(render).returncode == 0 else ["render"]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
