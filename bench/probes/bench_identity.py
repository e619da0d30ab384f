"""What verified identity costs: the hook's ticket fetch, and the per-report check.

    python bench/probes/bench_identity.py [--fetches 500] [--reports 20000] [--repeats 7]

1. ``fetch_ticket``: the round trip a hook makes once per session, before its
   Hello (never per step), against a real identity socket served by a
   ``TicketDesk`` in another process: median and p99.
2. ``SidecarServicer.handle`` per report, the per-message ingest path, which
   now also checks that the session was not taken over: best and median of
   ``--repeats`` passes over ``--reports`` reports. Compare with the same
   script run on a checkout before issue 13 (the check is one attribute read).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path

add_repo_to_path()

from trainprobe.proto import PROTOCOL_VERSION, fetch_ticket, probe_pb2  # noqa: E402
from trainprobe.sidecar.core.session.registry import Registry  # noqa: E402
from trainprobe.sidecar.transport.commander import Commander  # noqa: E402
from trainprobe.sidecar.transport.servicer import SidecarServicer  # noqa: E402


def _serve(path: str, ready: object) -> None:
    from trainprobe.proto import ident_socket_path
    from trainprobe.sidecar.transport.listen.identity import TicketDesk

    async def main() -> None:
        desk = TicketDesk()
        await desk.listen(Path(ident_socket_path(path)))
        ready.set()  # type: ignore[attr-defined]
        await asyncio.sleep(3600)

    asyncio.run(main())


def bench_fetch(n: int) -> str:
    path = tempfile.mkdtemp(prefix="tpid-") + "/sidecar.sock"
    ready = mp.Event()
    server = mp.Process(target=_serve, args=(path, ready), daemon=True)
    server.start()
    ready.wait(30)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        assert fetch_ticket(f"unix://{path}")
        times.append(time.perf_counter() - t0)
    server.terminate()
    times.sort()
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    median = statistics.median(times)
    return f"fetch_ticket: median {median * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us over {n}"


def bench_handle(n: int, repeats: int) -> str:
    servicer = SidecarServicer(Registry(), Commander(), lambda _: probe_pb2.StatusReply())
    hello = probe_pb2.Hello(
        protocol_version=PROTOCOL_VERSION,
        job_id="b",
        rank=0,
        world_size=1,
        pid=12345,
        host="h",
        interval_ms=100,
    )
    state, refusal = servicer.open_session(probe_pb2.WorkerMessage(hello=hello), relay=None)
    assert state is not None, refusal
    msgs = []
    for i in range(1, n + 1):
        now = 10**9 + i * 10**8
        report = probe_pb2.Report(
            seq=i,
            mono_ns=now,
            has_step=True,
            last_step=i,
            last_step_mono_ns=now - 1000,
            total_steps=i,
            step_stats=probe_pb2.StepStats(count=1, sum_s=0.1, max_s=0.1),
            recent_steps=[i],
            recent_step_end_mono_ns=[now - 1000],
            recent_step_s=[0.1],
        )
        msgs.append(probe_pb2.WorkerMessage(report=report))
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for m in msgs:
            servicer.handle(state, m)
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return (
        f"handle per report: best {min(runs):.2f} us, median {statistics.median(runs):.2f} us "
        f"over {repeats} x {n:,}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fetches", type=int, default=500)
    p.add_argument("--reports", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} at start")
    print(bench_fetch(args.fetches))
    print(bench_handle(args.reports, args.repeats))


if __name__ == "__main__":
    main()
