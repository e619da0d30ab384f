"""What one session costs the sidecar, by layer: connection, stream, reports.

    python bench/bench_session_cost.py [--streams 2000] [--connections 200]
        [--relayed K] [--reports 3] [--buckets 4] [--settle-s 5] [--telemetry on|off] [--traced]
        [--pymalloc] [--json OUT]

One sidecar process of the shipped defaults (actions ``observe``) and, in
this process, one gRPC client that goes through the stages below, reading
the sidecar's RSS (``/proc/PID/statm``) and its anonymous memory by kind
(``/proc/PID/smaps``: the brk heap, other anonymous mappings: glibc's
per-thread arenas and large blocks) after each, once the sidecar is quiet (under 30 % of a core
for 1 s: it applied what was sent) and ``--settle-s`` later:

1. idle: started, nothing connected;
2. connections: ``--connections`` channels connected (HTTP/2 set up, no call);
3. streams: ``--streams`` Connect streams over them, each past its Hello
   (a session in the registry, its servicer coroutine waiting to read);
4. reports: ``--reports`` reports on each (the first with 1,000 earlier step
   times, bench/harness/loadgen.py's; each new step with ``--buckets`` DDP allreduces
   in its sync window, the latest 16 sampled, as ``hook.watch_ddp`` sends
   them), so each session's state is full;
5. closed: every stream said Goodbye and every channel closed.

With ``--relayed K`` the sessions arrive as a sidecar of 10,000 ranks gets
them: through node sidecars in relay mode (``--relay-to``), each node one
``Relay`` stream carrying K workers' sessions (its Hellos and reports in
``RelayBatch`` items, as bench/harness/relay_loadgen.py sends them), ``--streams``
sessions over ``--streams / K`` Relay streams; stage 5 ends each session with
a relayed Goodbye, then the Relay streams.

Each stage's cost is its RSS step divided by its count. With ``--traced``
the sidecar runs under tracemalloc (a sitecustomize; it costs memory of its
own, so RSS is quoted from untraced runs) and writes, at each stage, the
Python heap it traces and the lines that grew most: the Python share of each
layer; the rest of the RSS step is C (gRPC core, glibc). With ``--pymalloc``
(untraced) the sidecar writes CPython's allocator figures at each stage
(``sys._debugmallocstats``): small objects' live bytes, and what pymalloc holds
free in used pools and empty ones, so the RSS splits into live Python objects,
pymalloc's fragmentation and the rest (bench/harness/sidecar_memory.py injects both).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from harness.common import add_repo_to_path, cpu_seconds, rss_bytes, write_result

add_repo_to_path()

import grpc  # noqa: E402
from harness.loadgen import Sim, end_call  # noqa: E402
from harness.sidecar_memory import MALLOCSTATS, TRACER, anon_kinds, pymalloc_figures, with_site  # noqa: E402

from tests.support import SidecarProcess, short_tmpdir  # noqa: E402
from trainprobe.proto import probe_pb2, probe_pb2_grpc  # noqa: E402


class Stages:
    def __init__(
        self, sc: SidecarProcess, traced: Path | None, settle_s: float, malloc: Path | None = None
    ) -> None:
        assert sc.proc is not None
        self.pid = sc.proc.pid
        self.traced = traced
        self.malloc = malloc
        self.settle_s = settle_s
        self.rows: list[dict[str, Any]] = []

    async def quiet(self, timeout_s: float = 300.0) -> None:
        """Until the sidecar has applied what was sent: under 30 % of a core for 1 s
        (its rules tick alone takes some at 10,000 sessions)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            before = cpu_seconds(self.pid)
            await asyncio.sleep(1.0)
            if cpu_seconds(self.pid) - before < 0.3:
                return

    async def dump(self, out: Path) -> str:
        """What the sidecar's sitecustomize appends to ``out`` on SIGUSR2 ('' if
        nothing came within a minute)."""
        size = out.stat().st_size if out.exists() else 0
        os.kill(self.pid, signal.SIGUSR2)
        for _ in range(600):
            await asyncio.sleep(0.1)
            if out.exists() and out.stat().st_size > size:
                await asyncio.sleep(0.5)  # written in one go, within this
                return out.read_text()[size:]
        return ""

    async def mark(self, stage: str, count: int) -> None:
        await self.quiet()
        await asyncio.sleep(self.settle_s)
        row: dict[str, Any] = {"stage": stage, "count": count, "rss_bytes": rss_bytes(self.pid)}
        row.update(anon_kinds(self.pid))
        if self.traced is not None and (text := await self.dump(self.traced)):
            # Our own tracer's repr of ints and strs.
            row["python_bytes"], row["python_top"] = eval(text.splitlines()[-1])
        if self.malloc is not None and (text := await self.dump(self.malloc)):
            row.update(pymalloc_figures(text))
        if self.rows:
            prev = self.rows[-1]
            row["rss_step_bytes"] = row["rss_bytes"] - prev["rss_bytes"]
            if "python_bytes" in row:
                row["python_step_bytes"] = row["python_bytes"] - prev["python_bytes"]
            if count:
                row["rss_per_item"] = row["rss_step_bytes"] / count
                if "python_step_bytes" in row:
                    row["python_per_item"] = row["python_step_bytes"] / count
        self.rows.append(row)
        print(
            f"{stage:12s} rss {row['rss_bytes'] / 1e6:7.1f} MB"
            + (
                f"  step {row['rss_step_bytes'] / 1e6:+7.1f} MB"
                + (f" = {row['rss_per_item'] / 1024:6.1f} KiB each" if count else "")
                if "rss_step_bytes" in row
                else ""
            )
            + (
                f"  python {row['python_bytes'] / 1e6:6.1f} MB"
                + (
                    f" ({row['python_per_item'] / 1024:5.1f} KiB each)"
                    if "python_per_item" in row
                    else ""
                )
                if "python_bytes" in row
                else ""
            )
            + f"  heap {row['heap'] / 1e6:.1f} other-anon {row['anon_other'] / 1e6:.1f}"
            + (
                f"  pymalloc live {row['pymalloc_live'] / 1e6:.1f}"
                f" free-in-pools {row['pymalloc_free_in_pools'] / 1e6:.1f}"
                f" empty-pools {row['pymalloc_empty_pools'] / 1e6:.1f}"
                if "pymalloc_live" in row
                else ""
            ),
            flush=True,
        )


async def run(args: argparse.Namespace, sc: SidecarProcess, stages: Stages) -> None:
    await stages.mark("idle", 0)
    channels = [
        grpc.aio.insecure_channel(sc.target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(args.connections)
    ]
    await asyncio.gather(*(ch.channel_ready() for ch in channels))
    await stages.mark("connections", args.connections)
    sims = [
        Sim("cost", r, args.streams, 20, args.fill, buckets=args.buckets)
        for r in range(args.streams)
    ]
    if args.relayed:
        await run_relayed(args, sc, stages, channels, sims)
        return
    calls = [
        probe_pb2_grpc.SidecarStub(channels[i % len(channels)]).Connect() for i in range(len(sims))
    ]
    await asyncio.gather(
        *(c.write(probe_pb2.WorkerMessage(hello=s.hello)) for c, s in zip(calls, sims, strict=True))
    )
    await wait_sessions(sc, args.streams)
    await stages.mark("streams", args.streams)
    for _ in range(args.reports):
        await asyncio.gather(*(c.write(s.report()) for c, s in zip(calls, sims, strict=True)))
    await stages.mark("reports", args.streams)
    bye = probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye(reason="bench done"))
    await asyncio.gather(*(c.write(bye) for c in calls))
    await close_all(calls, channels)
    await stages.mark("closed", 0)


RELAY = "/trainprobe.v1.Sidecar/Relay"


async def run_relayed(
    args: argparse.Namespace, sc: SidecarProcess, stages: Stages, channels: list, sims: list[Sim]
) -> None:
    """Stages 3-5 with every session relayed: ``args.relayed`` per Relay stream."""
    k = args.relayed
    nodes = [sims[i : i + k] for i in range(0, len(sims), k)]
    calls = [
        channels[i % len(channels)].stream_stream(
            RELAY,
            request_serializer=probe_pb2.RelayBatch.SerializeToString,
            response_deserializer=probe_pb2.RelayCommand.FromString,
        )()
        for i in range(len(nodes))
    ]

    def batch(node: list[Sim], make: Any) -> probe_pb2.RelayBatch:
        b = probe_pb2.RelayBatch()
        for sid, sim in enumerate(node, 1):
            b.items.add(stream_id=sid, message=make(sim).SerializeToString())
        return b

    await asyncio.gather(
        *(
            c.write(batch(n, lambda s: probe_pb2.WorkerMessage(hello=s.hello)))
            for c, n in zip(calls, nodes, strict=True)
        )
    )
    await wait_sessions(sc, args.streams)
    await stages.mark("streams", args.streams)
    for _ in range(args.reports):
        await asyncio.gather(
            *(c.write(batch(n, Sim.report)) for c, n in zip(calls, nodes, strict=True))
        )
    await stages.mark("reports", args.streams)
    bye = probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye(reason="bench done"))
    await asyncio.gather(
        *(c.write(batch(n, lambda s: bye)) for c, n in zip(calls, nodes, strict=True))
    )
    await close_all(calls, channels)
    await stages.mark("closed", 0)


async def close_all(calls: list, channels: list) -> None:
    """Stage 5's end, once every stream's Goodbye is written: half-close, wait for
    the sidecar to end each stream (a cancel could overtake the Goodbye), close."""
    await asyncio.gather(*(c.done_writing() for c in calls))
    await asyncio.gather(*(end_call(c) for c in calls))
    for ch in channels:
        await ch.close()


async def wait_sessions(sc: SidecarProcess, n: int, timeout_s: float = 300.0) -> None:
    """Until the sidecar's status counts ``n`` connected sessions."""
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(sc.target) as ch:
        stub = probe_pb2_grpc.SidecarStub(ch)
        while time.monotonic() < deadline:
            st = await stub.GetStatus(probe_pb2.StatusRequest(job_id="cost"), timeout=30)
            if len(st.workers) + st.omitted >= n:
                return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"fewer than {n} sessions after {timeout_s:.0f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", type=int, default=2000)
    p.add_argument("--connections", type=int, default=200)
    p.add_argument(
        "--relayed", type=int, default=0, help="K sessions per Relay stream (0: Connect streams)"
    )
    p.add_argument("--reports", type=int, default=3)
    p.add_argument(
        "--fill", type=int, default=1000, help="earlier step times in each session's first report"
    )
    p.add_argument(
        "--buckets",
        type=int,
        default=4,
        help="DDP gradient buckets a step, each a sampled allreduce (0: no sync window)",
    )
    p.add_argument("--settle-s", type=float, default=5.0)
    p.add_argument("--telemetry", choices=["on", "off"], default="on")
    p.add_argument("--traced", action="store_true")
    p.add_argument("--pymalloc", action="store_true", help="CPython allocator figures a stage")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the sidecar")
    p.add_argument("--json", default="")
    args = p.parse_args()
    started = time.monotonic()
    work = short_tmpdir("tpcost-")
    env: dict[str, str] = {}
    traced = malloc = None
    if args.traced and args.pymalloc:
        p.error("--traced and --pymalloc measure different things: one at a time")
    if args.pymalloc:
        malloc, env = with_site(work, MALLOCSTATS, "TP_MALLOC_OUT")
    if args.traced:
        traced, env = with_site(work, TRACER, "TP_TRACE_OUT")
    env.update(kv.split("=", 1) for kv in args.env)
    flags = ["--on-hung", "observe", "--on-unresponsive", "observe", "--log-level", "warning"]
    flags.append("--telemetry" if args.telemetry == "on" else "--no-telemetry")
    sc = SidecarProcess(work, *flags, env=env).start(timeout_s=120)
    try:
        stages = Stages(sc, traced, args.settle_s, malloc)
        asyncio.run(run(args, sc, stages))
    finally:
        sc.stop()
    if args.json:
        params = {k: v for k, v in vars(args).items() if k != "json"}
        write_result(args.json, "session_cost", {"params": params, "stages": stages.rows}, started)
    print(json.dumps({r["stage"]: r.get("rss_per_item") for r in stages.rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
