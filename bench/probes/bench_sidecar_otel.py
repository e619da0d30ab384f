"""Sidecar CPU per 1,000 reports/s with telemetry off and on, side by side.

    python bench/probes/bench_sidecar_otel.py [--rounds 5] [--window-s 5] [--rate 1000]
                                      [--workers 8] [--json OUT]

Every mode is its own real sidecar process (the CLI), started once; the rounds
interleave the modes so that machine noise hits them alike:

  off           --no-telemetry
  metrics       OTLP metrics only (OTEL_TRACES_EXPORTER=none), to a receiver process
  otlp          traces and metrics over OTLP/gRPC, one step span per 100 steps (default)
  file          the default without a collector: OTLP-JSON lines in state_dir
  otlp-every    --trace-every-n-steps 1: every step and every collective is a span

Load: ``--workers`` real Connect streams from this process (Hello, then
Reports), ``--rate`` reports/s in all. Each report covers ``--steps-per-report``
steps with ``--buckets`` gradient-sync buckets each (one collective sample per
bucket), GPU memory and one process group. CPU is the sidecar process's
utime+stime from /proc over the window, after a warm-up; it is divided by the
achieved rate / 1000, so the figure is "cores used per 1,000 reports/s".

``--encoder`` instead measures, in this process, what the SDK's OTLP encoder
costs per span with 0, 5, 10 and 15 attributes (why spans carry few). The
receivers and the encoder's measurement are bench/probes/otlp_side.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path, cpu_seconds, rss_bytes
from otlp_side import Receiver, encoder_cost

add_repo_to_path()

import grpc  # noqa: E402

from tests.support import SidecarProcess, short_tmpdir  # noqa: E402
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2, probe_pb2_grpc  # noqa: E402

GIB = 1 << 30


# -- load ---------------------------------------------------------------------------


def make_report(
    seq: int,
    step: int,
    group_seq: int,
    steps: int = 1,
    buckets: int = 2,
    prev_end: int = 0,
    now: int | None = None,
) -> probe_pb2.Report:
    """A report of ``steps`` steps that ran back to back since ``prev_end`` (the
    previous report's last step) until ``now``, as the hook reports them; each
    step's backward (its second half) runs ``buckets`` allreduces in turn."""
    now = time.monotonic_ns() if now is None else now
    prev_end = prev_end or now - 8_000_000
    step_ns = max(1, (now - prev_end) // steps)
    ends = [now - (steps - 1 - i) * step_ns for i in range(steps)]
    step_s = step_ns / 1e9
    r = probe_pb2.Report(
        seq=seq,
        mono_ns=now + 1000,
        wall_ns=time.time_ns(),
        has_step=True,
        last_step=step + steps,
        last_step_mono_ns=now,
        total_steps=step + steps,
        step_stats=probe_pb2.StepStats(count=steps, sum_s=step_s * steps, max_s=step_s),
        recent_steps=[step + 1 + i for i in range(steps)],
        recent_step_end_mono_ns=ends,
        recent_step_s=[step_s] * steps,
        gpu_memory=probe_pb2.GpuMemory(
            has_nvml=True,
            device_used_bytes=30 * GIB,
            device_total_bytes=80 * GIB,
            reserved_bytes=28 * GIB,
            allocated_bytes=20 * GIB,
        ),
    )
    n = steps * buckets
    slot = step_ns // (2 * buckets)  # the second half of a step is its backward
    r.sync.count = n
    r.sync.p50_s = r.sync.max_s = slot * 0.8 / 1e9
    r.sync.groups.add(group="dp", issued=group_seq + n, completed=group_seq + n)
    for i, end in enumerate(ends):
        for b in range(buckets):
            start = end - step_ns // 2 + b * slot
            r.sync.samples.add(
                group="dp",
                seq=group_seq + buckets * i + b + 1,
                op="allreduce",
                bytes=25 << 20,
                start_mono_ns=start,
                end_mono_ns=start + slot * 8 // 10,
                step=step + i + 1,
            )
    return r


async def worker(
    target: str,
    job: str,
    rank: int,
    world: int,
    interval_s: float,
    stop: asyncio.Event,
    sent: list[int],
    shape: tuple[int, int],
) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        call = probe_pb2_grpc.SidecarStub(channel).Connect()
        await call.write(
            probe_pb2.WorkerMessage(
                hello=probe_pb2.Hello(
                    protocol_version=PROTOCOL_VERSION,
                    hook_version="bench",
                    job_id=job,
                    rank=rank,
                    local_rank=rank,
                    world_size=world,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    interval_ms=max(10, round(interval_s * 1000)),
                )
            )
        )
        seq = step = gseq = prev_end = 0
        due = time.monotonic()
        while not stop.is_set():
            seq += 1
            report = make_report(seq, step, gseq, *shape, prev_end=prev_end)
            prev_end = report.last_step_mono_ns
            await call.write(probe_pb2.WorkerMessage(report=report))
            sent[0] += 1
            step, gseq = step + shape[0], gseq + shape[0] * shape[1]
            due += interval_s
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        await call.write(probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye(reason="bench")))
        await call.done_writing()
        async for _ in call:
            pass


async def window(sc: SidecarProcess, job: str, args: argparse.Namespace) -> dict[str, float]:
    assert sc.proc is not None
    stop = asyncio.Event()
    sent = [0]
    interval = args.workers / args.rate
    tasks = [
        asyncio.ensure_future(
            worker(
                sc.target,
                job,
                r,
                args.workers,
                interval,
                stop,
                sent,
                (args.steps_per_report, args.buckets),
            )
        )
        for r in range(args.workers)
    ]
    await asyncio.sleep(args.warmup_s)
    c0, t0, n0 = cpu_seconds(sc.proc.pid), time.monotonic(), sent[0]
    await asyncio.sleep(args.window_s)
    c1, t1, n1 = cpu_seconds(sc.proc.pid), time.monotonic(), sent[0]
    stop.set()
    await asyncio.gather(*tasks)
    rate = (n1 - n0) / (t1 - t0)
    cores = (c1 - c0) / (t1 - t0)
    return {
        "rate": rate,
        "cores": cores,
        "per_1000": cores / (rate / 1000),
        "seconds": t1 - t0,
        "reports": sent[0],  # with the warm-up: every report the sidecar built spans from
    }


# -- main ---------------------------------------------------------------------------

#: mode -> (flags, environment)
MODES: dict[str, tuple[list[str], dict[str, str]]] = {
    "off": (["--no-telemetry"], {}),
    "metrics": (["--otlp-endpoint", "{metrics}"], {"OTEL_TRACES_EXPORTER": "none"}),
    "otlp": (["--otlp-endpoint", "{otlp}"], {}),
    "file": ([], {}),
    "otlp-every": (["--otlp-endpoint", "{otlp_every}", "--trace-every-n-steps", "1"], {}),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--window-s", type=float, default=5.0)
    p.add_argument("--warmup-s", type=float, default=1.5)
    p.add_argument("--rate", type=float, default=1000.0, help="reports/s, all workers together")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--steps-per-report", type=int, default=1)
    p.add_argument("--buckets", type=int, default=2, help="collective samples per step")
    p.add_argument("--json", default="")
    p.add_argument("--encoder", action="store_true", help="measure the OTLP encoder only")
    args = p.parse_args()
    if args.encoder:
        encoder_cost()
        return 0
    workdir = short_tmpdir("tpo-")
    receivers = {k: Receiver(workdir) for k in ("metrics", "otlp", "otlp_every")}
    sidecars: dict[str, SidecarProcess] = {}
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    try:
        for mode, (flags, env) in MODES.items():
            flags = [
                f.format(**{k: f"http://127.0.0.1:{r.port}" for k, r in receivers.items()})
                for f in flags
            ]
            d = workdir / mode
            d.mkdir()
            sc = SidecarProcess(d, "--log-level", "warning", *flags, env=env)
            sidecars[mode] = sc.start()
        for rnd in range(args.rounds):
            for mode, sc in sidecars.items():
                r = asyncio.run(window(sc, f"bench-{mode}-{rnd}", args))
                results[mode].append(r)
                print(
                    f"round {rnd + 1} {mode:<11} {r['rate']:7.0f} reports/s  "
                    f"{r['cores'] * 100:5.1f}% CPU  {r['per_1000'] * 100:5.1f}% per 1k/s",
                    flush=True,
                )
        time.sleep(2.0)  # let the last spans reach the receivers
        rss = {m: rss_bytes(sc.proc.pid) / 2**20 for m, sc in sidecars.items() if sc.proc}
    finally:
        for sc in sidecars.values():
            sc.stop()
        for r in receivers.values():
            r.stop()
    reports = {m: sum(x["reports"] for x in rs) for m, rs in results.items()}
    spans = {m.replace("_", "-"): r.spans() for m, r in receivers.items()}
    base = statistics.median(x["per_1000"] for x in results["off"])
    print(
        f"\nsidecar CPU per 1,000 reports/s ({args.workers} streams; {args.steps_per_report} "
        f"step(s) and {args.steps_per_report * args.buckets} collective samples per report; "
        f"{args.rounds} rounds of {args.window_s:g} s; median):"
    )
    print("| mode | CPU per 1,000 reports/s | vs off | min..max | RSS after | spans per report |")
    print("| --- | --- | --- | --- | --- | --- |")
    summary = {}
    for mode, rs in results.items():
        vals = [x["per_1000"] for x in rs]
        med = statistics.median(vals)
        received = spans.get(mode) if mode != "metrics" else None
        summary[mode] = {
            "median_per_1000": med,
            "ratio": med / base,
            "runs": rs,
            "rss_mib": rss[mode],
        }
        print(
            f"| {mode} | {med * 100:.1f}% of a core | {med / base:.2f}x | "
            f"{min(vals) * 100:.1f}..{max(vals) * 100:.1f}% | {rss[mode]:.0f} MiB | "
            + (f"{received / reports[mode]:.3f}" if received is not None else "-")
            + " |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
