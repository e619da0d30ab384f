"""What one upstream costs in summary mode (``job_sync_to``), by the number of nodes.

    python bench/bench_summary_sync.py [--nodes 10,100,1000] [--ranks-per-node 8]
        [--procs 4] [--window-s 10] [--settle-s 60] [--incident]
        [--json bench/results/summary_sync.json]

    # the issue's size, on a 16-core machine (the upstream pinned to CPU 0):
    python bench/bench_summary_sync.py --nodes 12500 --procs 14 --window-s 30 --incident

The upstream is a real sidecar process (telemetry off), pinned to one CPU.
``--nodes`` simulated node sidecars (``summary_load.py``), spread over
``--procs`` load processes (pinned to the other CPUs), each keep one real
JobSync stream over a Unix socket, and run the node's own code for it:
every 500 ms a round of ``--ranks-per-node`` healthy ranks (a step every 200 ms, collectives briefly
in flight), what to ask from :class:`~trainprobe.sidecar.core.job.view.JobView`,
what to send from :class:`~trainprobe.sidecar.core.job.uplink.Uplink`, the
answers applied to the view. All nodes are one job (``N x ranks`` ranks).

The steady state is measured, not the start: once every stream is up the
bench waits until the messages the nodes sent over the last heartbeat (10 s:
a healthy node sends one each, the first full upload or a heartbeat) are
within 20% of those over the heartbeat before (at most ``--settle-s``), and
says how long that took and whether it settled. Then over ``--window-s``
(a heartbeat at least, or it may fall between the nodes' bursts): the
upstream's CPU seconds per second (its /proc utime + stime), its RSS at the
end and its peak (VmHWM), the messages the nodes sent and received a second,
and the answers after which node 1's view named a culprit of the healthy job
(false culprits). With
``--incident``, then, rank 0 (node 0) stops at the onset: its summary says so
at its node's next round (as its node's rules and /proc would), and the bench
measures the seconds from the onset until node 1's view holds it silent and
names it the culprit (:func:`~trainprobe.sidecar.core.job.view.analyze_job`),
and the upstream's CPU during the 10 s after.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.common import add_repo_to_path, cpu_seconds, write_result

add_repo_to_path()

from harness.summary_load import K, load, raise_fds  # noqa: E402

from trainprobe.sidecar.core.job.uplink import HEARTBEAT_S  # noqa: E402


def _status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def measure(
    n: int, per: int, procs: int, window_s: float, incident: bool, settle_s: float
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tpsum-"))
    sock = work / "up.sock"
    cpus = sorted(os.sched_getaffinity(0))
    up_cpu, load_cpus = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    env = {**os.environ, "TRAINPROBE_TELEMETRY": "false", "OTEL_SDK_DISABLED": "true"}
    with open(work / "up.log", "wb") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "trainprobe.sidecar", "--listen", f"unix://{sock}",
             "--state-dir", str(work / "state")],
            env=env, stdout=subprocess.DEVNULL, stderr=log,
            preexec_fn=lambda: (raise_fds(), os.sched_setaffinity(0, up_cpu)),
        )  # fmt: skip
    try:
        while not sock.exists():
            time.sleep(0.05)
            if up.poll() is not None:
                raise SystemExit((work / "up.log").read_text())
        procs = max(1, min(procs, n))
        counters = mp.Array("q", K * procs)
        stop_at = mp.Value("d", 0.0)
        chunk = -(-n // procs)
        loads = []
        for p in range(procs):
            nodes = range(p * chunk, min(n, (p + 1) * chunk))
            loads.append(
                mp.Process(
                    target=load,
                    args=(p, nodes, per, n * per, f"unix://{sock}", load_cpus, counters, stop_at),
                    daemon=True,
                )
            )
            loads[-1].start()

        def total(k: int) -> int:
            return sum(counters[K * p + k] for p in range(procs))

        deadline = time.monotonic() + 60 + n / 50
        while total(0) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        connected, up_at = total(0), time.monotonic()
        settled = _settle(lambda: total(1), settle_s)
        c0, s0, r0, t0 = cpu_seconds(up.pid), total(1), total(2), time.monotonic()
        time.sleep(window_s)
        c1, s1, r1, t1 = cpu_seconds(up.pid), total(1), total(2), time.monotonic()
        out: dict[str, Any] = {
            "nodes": n,
            "ranks": n * per,
            "connected": connected,
            "settled": settled,
            "measured_after_s": round(t0 - up_at, 1),
            "upstream_cores": round((c1 - c0) / (t1 - t0), 4),
            "upstream_rss_mb": round(_status(up.pid, "VmRSS") / 2**20, 1),
            "upstream_peak_rss_mb": round(_status(up.pid, "VmHWM") / 2**20, 1),
            "sent_per_s": round((s1 - s0) / (t1 - t0), 1),
            "received_per_s": round((r1 - r0) / (t1 - t0), 1),
            "false_culprits": total(4),
        }
        if incident:
            stop_at.value = time.monotonic()
            c0, s0, r0, t0 = cpu_seconds(up.pid), total(1), total(2), time.monotonic()
            time.sleep(10.0)
            c1, s1, r1, t1 = cpu_seconds(up.pid), total(1), total(2), time.monotonic()
            out["incident_sent_per_s"] = round((s1 - s0) / (t1 - t0), 1)
            out["incident_received_per_s"] = round((r1 - r0) / (t1 - t0), 1)
            named = max(counters[K * p + 3] for p in range(procs))
            out["incident_upstream_cores"] = round((c1 - c0) / (t1 - t0), 4)
            out["culprit_named_after_s"] = round(named / 1000, 3) if named else None
            # The load processes' own lag (a busy machine): the onset to node 0's upload.
            sent_ms = max(counters[K * p + 5] for p in range(procs))
            out["stop_sent_after_s"] = round(sent_ms / 1000, 3)
            out["incident_peak_rss_mb"] = round(_status(up.pid, "VmHWM") / 2**20, 1)
        for proc in loads:
            proc.kill()
        return out
    finally:
        up.terminate()
        try:
            up.wait(10)
        except subprocess.TimeoutExpired:
            up.kill()
        shutil.rmtree(work, ignore_errors=True)


def _settle(sent: Any, limit_s: float) -> bool:
    """Wait out the start: until the messages sent over the last heartbeat (a
    healthy node sends one each, in bursts) are within 20% of those over the
    heartbeat before; False if that took more than ``limit_s``."""
    beat = int(HEARTBEAT_S)
    counts = [sent()]
    deadline = time.monotonic() + limit_s
    while True:
        time.sleep(1.0)
        counts.append(sent())
        if len(counts) > 2 * beat:
            last = counts[-1] - counts[-1 - beat]
            before = counts[-1 - beat] - counts[-1 - 2 * beat]
            if abs(last - before) <= 0.2 * max(before, 1):
                return True
        if time.monotonic() >= deadline:
            return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="10,100,400")
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--procs", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 1)))
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--incident", action="store_true")
    ap.add_argument("--settle-s", type=float, default=60.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    started = time.monotonic()
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        row = measure(
            n, args.ranks_per_node, args.procs, args.window_s, args.incident, args.settle_s
        )
        rows.append(row)
        state = "settled" if row["settled"] else "NOT settled"
        print(
            f"{row['nodes']:>6} nodes ({row['ranks']:>7} ranks, {row['connected']} up): "
            f"steady state ({state}, from {row['measured_after_s']} s after the last node "
            f"connected, over {args.window_s:g} s): "
            f"upstream {row['upstream_cores']:.3f} cores, RSS {row['upstream_rss_mb']} MB "
            f"(peak {row['upstream_peak_rss_mb']}); nodes sent {row['sent_per_s']}/s, "
            f"received {row['received_per_s']}/s, {row['false_culprits']} false culprits"
            + (
                f"; incident: {row['incident_upstream_cores']:.3f} cores, nodes sent "
                f"{row['incident_sent_per_s']}/s, received {row['incident_received_per_s']}/s, "
                "culprit named "
                f"{row['culprit_named_after_s']} s after onset (node 0 sent it "
                f"{row['stop_sent_after_s']} s after)"
                if args.incident
                else ""
            ),
            flush=True,
        )
    if args.json:
        write_result(args.json, "summary_sync", {"rows": rows, "args": vars(args)}, started)


if __name__ == "__main__":
    main()
