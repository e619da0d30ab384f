"""Probe speed: how soon a kubelet-style probe sees NOT_SERVING after the kill decision.

    python bench/bench_health.py [--trials 10] [--poll-ms 20] [--json OUT]

A real sidecar process (TCP listener behind a token); per trial, a hooked
worker (tests/workers/hang_after.py, SIGTERM ignored so the process outlives
the decision by kill_grace_s) steps, then hangs. A probe asks
``grpc.health.v1.Health/Check`` for ``trainprobe.workers`` every ``poll_ms``
on a fresh call, without a token, as the kubelet does. Latency = wall time at which
the first NOT_SERVING answer arrived minus the incident's ``time`` (the wall clock of
the tick that decided the kill); the poll interval bounds its resolution.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.common import add_repo_to_path

add_repo_to_path()

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from tests.support import PYTHON, REPO, child_env, free_port, sidecar  # noqa: E402

WORKER = REPO / "tests" / "workers" / "hang_after.py"
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def trial(sc, stub: health_pb2_grpc.HealthStub, job: str, poll_s: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    worker = subprocess.Popen(
        [PYTHON, str(WORKER), job, "40", "--ignore-term"],
        env=child_env(TRAINPROBE_TARGET=sc.target),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline().startswith("hang")
        first_bad = 0.0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            req = health_pb2.HealthCheckRequest(service="trainprobe.workers")
            status = stub.Check(req, timeout=1).status
            if status == NOT_SERVING:
                # When the answer arrived: an upper bound, poll interval included.
                first_bad = time.time()
                break
            time.sleep(poll_s)
        inc = sc.wait_incident(lambda r: r["job_id"] == job, timeout_s=10)
        return {
            "latency_s": first_bad - inc["time"],
            "detection_latency_s": inc["detection_latency_s"],
        }
    finally:
        worker.kill()
        worker.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--poll-ms", type=float, default=20.0)
    p.add_argument("--json", default="")
    args = p.parse_args()
    port = free_port()
    flags = ("--listen", f"tcp://127.0.0.1:{port}", "--token", "bench")
    rules = ("--stall-timeout-s", "2", "--kill-grace-s", "3")
    rows = []
    load = os.getloadavg()[0]
    with sidecar(*flags, *rules) as sc, grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for i in range(args.trials):
            rows.append(trial(sc, stub, f"probe-{i}", args.poll_ms / 1000))
            print(json.dumps(rows[-1]), flush=True)
    lat = [r["latency_s"] for r in rows]
    result = {
        "command": "python bench/bench_health.py " + " ".join(sys.argv[1:]),
        "trials": len(rows),
        "poll_ms": args.poll_ms,
        "latency_median_s": round(statistics.median(lat), 3),
        "latency_max_s": round(max(lat), 3),
        "latency_min_s": round(min(lat), 3),
        "loadavg_1m_at_start": round(load, 2),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
