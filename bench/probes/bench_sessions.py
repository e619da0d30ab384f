"""What sessions cost the sidecar: RSS at the session cap, after churn, after close.

    python bench/probes/bench_sessions.py [--sessions 10000] [--rounds 3] [--hz 1]
        [--steps-per-report 20] [--generators 2] [--settle-s 10] [--after-s 30]
        [--telemetry on|off] [--quick] [--json OUT]

One sidecar process of the shipped defaults (every action ``observe``, so the
fleet is never killed; telemetry as shipped unless ``--telemetry off``) and
``--generators`` load-generator processes (bench/harness/loadgen.py) that open
``--sessions`` Connect streams between them, one per simulated worker, each
reporting at ``--hz`` with ``--steps-per-report`` new step times a report
(20: a 50 ms step under the hook's default 1 s interval). Every worker's first
report carries 1,000 earlier step times, so each session's step-time window is
full from the start, its steady-state size.

Each round uses a new job id (new sessions, while the previous round's ended
ones are still held): the generators connect every worker, the sidecar's RSS
is read once they all reported and ``--settle-s`` later (the round's peak
of the samples, taken every second), then the generators say Goodbye and
exit, and RSS is read again ``--settle-s`` after. After the last round, RSS
is read once more ``--after-s`` later. The cap is checked in the first round,
while every one of its sessions is live: one more Hello must get
RESOURCE_EXHAUSTED.

Goal (issue 21): RSS <= 150 MB with 10,000 sessions, in every round, and it
falls back after they end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path, rss_bytes, write_result

add_repo_to_path()

import grpc  # noqa: E402

from tests.support import PYTHON, SidecarProcess, child_env, short_tmpdir  # noqa: E402
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2, probe_pb2_grpc  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # bench/: loadgen, relay_loadgen
GOAL_BYTES = 150 * 1000 * 1000


def one_more_hello(target: str) -> str:
    """The status code a Hello beyond the cap gets (it must be refused)."""
    hello = probe_pb2.Hello(
        protocol_version=PROTOCOL_VERSION,
        hook_version="bench",
        job_id="one-too-many",
        rank=0,
        world_size=1,
        host="bench",
        pid=os.getpid(),
        interval_ms=1000,
    )
    with grpc.insecure_channel(target) as ch:
        call = probe_pb2_grpc.SidecarStub(ch).Connect(
            iter([probe_pb2.WorkerMessage(hello=hello)]), timeout=60
        )
        try:
            for _ in call:
                pass
        except grpc.RpcError as err:
            return err.code().name
    return "OK"


def run_round(sc: SidecarProcess, r: int, args: argparse.Namespace, rss_: Any) -> dict[str, Any]:
    workdir = short_tmpdir("tpss-")
    stop = workdir / "stop"
    per = [
        args.sessions // args.generators + (i < args.sessions % args.generators)
        for i in range(args.generators)
    ]
    gens = []
    offset = 0
    t0 = time.monotonic()
    for g, count in enumerate(per):
        cmd = [
            PYTHON,
            str(HERE / "harness" / "loadgen.py"),
            *("--target", sc.target, "--workers", str(count), "--hz", str(args.hz)),
            *("--job", f"round{r}", "--rank-offset", str(offset)),
            *("--world-size", str(args.sessions)),
            *("--steps-per-report", str(args.steps_per_report)),
            *("--ready", str(workdir / f"ready{g}"), "--stop", str(stop)),
            *("--out", str(workdir / f"gen{g}.json")),
        ]
        offset += count
        gens.append(subprocess.Popen(cmd, env=child_env()))
    peak = 0
    try:
        deadline = time.monotonic() + args.connect_timeout_s
        while not all((workdir / f"ready{g}").exists() for g in range(len(gens))):
            if time.monotonic() > deadline or any(p.poll() is not None for p in gens):
                raise RuntimeError(
                    f"round {r}: the generators did not connect every worker within "
                    f"{args.connect_timeout_s:.0f} s (or one exited: {[p.poll() for p in gens]})"
                )
            peak = max(peak, rss_())
            if int(time.monotonic() - t0) % 15 == 0:
                print(
                    f"  round {r}: {time.monotonic() - t0:.0f} s, rss {rss_() / 1e6:.1f} MB",
                    flush=True,
                )
            time.sleep(1.0)
        connected_s = time.monotonic() - t0
        cap = one_more_hello(sc.target) if r == 1 else ""
        until = time.monotonic() + args.settle_s
        while time.monotonic() < until:
            peak = max(peak, rss_())
            time.sleep(1.0)
        live = rss_()
        peak = max(peak, live)
        stop.touch()
        outs = []
        for p in gens:
            p.wait(300)
        for g in range(len(gens)):
            outs.append(json.loads((workdir / f"gen{g}.json").read_text()))
    finally:
        for p in gens:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    time.sleep(args.settle_s)
    closed = rss_()
    row = {
        "round": r,
        "connected_s": connected_s,
        "rss_live_bytes": live,
        "rss_peak_bytes": peak,
        "rss_closed_bytes": closed,
        "generator_errors": sum(o["n_errors"] for o in outs),
        "errors": [e for o in outs for e in o["errors"]][:5],
    }
    if cap:
        row["one_more_hello"] = cap
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sessions", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hz", type=float, default=1.0)
    p.add_argument("--steps-per-report", type=int, default=20)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument("--settle-s", type=float, default=10.0)
    p.add_argument("--after-s", type=float, default=30.0)
    p.add_argument("--connect-timeout-s", type=float, default=1200.0)
    p.add_argument("--telemetry", choices=["on", "off"], default="on")
    p.add_argument("--quick", action="store_true", help="1,000 sessions, 2 rounds, 3 s waits")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.quick:
        args.sessions, args.rounds, args.settle_s, args.after_s = 1000, 2, 3.0, 3.0
    started = time.monotonic()
    load0 = os.getloadavg()
    flags = ["--on-hung", "observe", "--on-unresponsive", "observe", "--log-level", "warning"]
    flags.append("--telemetry" if args.telemetry == "on" else "--no-telemetry")
    sc = SidecarProcess(short_tmpdir("tpsc-"), *flags).start(timeout_s=120)
    rows = []
    try:
        time.sleep(2.0)
        assert sc.proc is not None
        pid = sc.proc.pid
        idle = rss_bytes(pid)
        print(f"idle: rss {idle / 1e6:.1f} MB", flush=True)
        for r in range(1, args.rounds + 1):
            row = run_round(sc, r, args, lambda: rss_bytes(pid))
            rows.append(row)
            print(
                f"round {r}: {args.sessions} sessions connected in {row['connected_s']:.0f} s; "
                f"rss live {row['rss_live_bytes'] / 1e6:.1f} MB "
                f"(peak {row['rss_peak_bytes'] / 1e6:.1f}), "
                f"closed {row['rss_closed_bytes'] / 1e6:.1f} MB"
                + (f"; one more Hello: {row['one_more_hello']}" if "one_more_hello" in row else "")
                + (
                    f"; generator errors {row['generator_errors']}"
                    if row["generator_errors"]
                    else ""
                ),
                flush=True,
            )
        time.sleep(args.after_s)
        after = rss_bytes(pid)
        alive = sc.proc.poll() is None
    finally:
        sc.stop()
    per_session = (rows[0]["rss_live_bytes"] - idle) / args.sessions if rows else 0.0
    peak = max((r["rss_peak_bytes"] for r in rows), default=0)
    print(
        f"after {args.after_s:.0f} s: rss {after / 1e6:.1f} MB; "
        f"{per_session / 1024:.1f} KiB a session over idle; peak {peak / 1e6:.1f} MB "
        f"(goal {GOAL_BYTES / 1e6:.0f} MB); load at start {load0[0]:.2f}",
        flush=True,
    )
    data = {
        "params": {k: v for k, v in vars(args).items() if k != "json"},
        "rss_idle_bytes": idle,
        "rounds": rows,
        "rss_after_bytes": after,
        "bytes_per_session": per_session,
        "rss_peak_bytes": peak,
        "sidecar_alive": alive,
        "cap_holds": bool(rows) and rows[0].get("one_more_hello") == "RESOURCE_EXHAUSTED",
        "goal_bytes": GOAL_BYTES,
        "goal_met": bool(rows) and peak <= GOAL_BYTES,
    }
    if args.json:
        write_result(args.json, "sessions", data, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
