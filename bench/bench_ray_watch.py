"""The Ray watcher's CPU cost with N actors alive (issue 16's goal: < 2 % of a core at 100).

A local Ray (2 CPUs, dashboard on: the State API needs it), N idle actors
(``num_cpus=0``), and one :class:`RayWatcher` judging every ``interval_s``
for ``seconds``. Reported:

- ``watcher_core_pct``: CPU seconds of the watcher's own thread (``thread_time``
  around each snapshot and judgement) plus its py-spy children, per wall
  second, in percent of one core. This is the goal's figure.
- ``driver_core_pct``: the whole watching process (Ray's core-worker threads
  that carry ``ray.nodes()`` and the KV calls included), same window.
- ``ray_services_core_pct``: extra CPU of Ray's dashboard, GCS and raylet
  while watching, against an equal window without the watcher just before:
  the cost the State API calls put on the head node.

    python bench/bench_ray_watch.py --actors 100 --seconds 60 --json bench/results/ray_watch.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.common import add_repo_to_path, cpu_seconds, write_result

add_repo_to_path()


def ray_service_pids() -> dict[str, int]:
    """Pids of this user's Ray head services (dashboard, GCS, raylet)."""
    out = subprocess.run(
        ["ps", "-o", "pid=,args=", "-u", str(os.getuid())], capture_output=True, text=True
    )
    pids = {}
    for line in out.stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        for name, mark in (
            ("gcs", "gcs_server"),
            ("raylet", "/raylet "),
            ("dashboard", "dashboard.py"),
        ):
            if mark in args and name not in pids:
                pids[name] = int(pid)
    return pids


def services_cpu(pids: dict[str, int]) -> float:
    return sum(cpu_seconds(p) for p in pids.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actors", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval-s", type=float, default=2.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    started = time.monotonic()

    from tests.ray_support import init_local_ray, ray_environment
    from trainprobe.sidecar.ray.watcher import RayWatcher

    with ray_environment():
        ray = init_local_ray(num_cpus=2)
        try:

            @ray.remote(num_cpus=0)
            class Idle:
                def ping(self) -> int:
                    return os.getpid()

            t0 = time.monotonic()
            actors = [Idle.remote() for _ in range(args.actors)]
            pids = ray.get([a.ping.remote() for a in actors], timeout=600)
            startup_s = time.monotonic() - t0
            time.sleep(5)  # let the start-up settle before the baseline
            services = ray_service_pids()

            # Baseline: Ray's services with nobody watching.
            base0 = services_cpu(services)
            time.sleep(args.seconds)
            base_rate = (services_cpu(services) - base0) / args.seconds

            watcher = RayWatcher()
            stop = threading.Event()
            snap_s: list[float] = []

            def loop() -> None:
                while not stop.is_set():
                    t = time.monotonic()
                    watcher.judge()
                    snap_s.append(time.monotonic() - t)
                    stop.wait(max(0.0, args.interval_s - (time.monotonic() - t)))

            proc0, svc0, wall0 = cpu_seconds(os.getpid()), services_cpu(services), time.monotonic()
            thread = threading.Thread(target=loop, name="trainprobe-ray-watch")
            thread.start()
            time.sleep(args.seconds)
            stop.set()
            thread.join()
            wall = time.monotonic() - wall0
            proc = cpu_seconds(os.getpid()) - proc0
            svc = services_cpu(services) - svc0
            snap = watcher.last
            result = {
                "actors": args.actors,
                "actors_alive_seen": sum(1 for a in snap.actors if a.state == "ALIVE")
                if snap
                else 0,
                "distinct_pids": len(set(pids)),
                "actor_startup_s": round(startup_s, 1),
                "interval_s": args.interval_s,
                "wall_s": round(wall, 2),
                "snapshots": watcher.snapshots,
                "snapshot_s_median": round(sorted(snap_s)[len(snap_s) // 2], 4) if snap_s else None,
                "snapshot_s_max": round(max(snap_s), 4) if snap_s else None,
                "watcher_cpu_s": round(watcher.cpu_s, 3),
                "watcher_core_pct": round(100 * watcher.cpu_s / wall, 3),
                "driver_core_pct": round(100 * proc / wall, 3),
                "ray_services_core_pct": round(100 * (svc / wall - base_rate), 3),
                "ray_services_baseline_core_pct": round(100 * base_rate, 3),
                "findings": [f.to_record() for f in watcher.findings],
                "truncated": list(snap.truncated) if snap else [],
                "goal_core_pct": 2.0,
            }
        finally:
            ray.shutdown()
    print(json.dumps(result, indent=2))
    if args.json:
        write_result(args.json, "ray_watch", result, started)


if __name__ == "__main__":
    main()
