"""What one session costs the sidecar, by structure (tracemalloc, in process).

    python bench/session_structures.py [--sessions 2000] [--reports 3]
        [--steps-per-report 20] [--buckets 4] [--telemetry on|off] [--json OUT]

``--sessions`` simulated workers (bench/harness/loadgen.py's reports: the first with
1,000 earlier step times, then ``--steps-per-report`` new ones, each new step
with ``--buckets`` DDP allreduces, the latest 16 sampled) are opened in a
real Registry and ``--reports`` reports each are parsed, converted, applied,
handed to the sidecar's Telemetry (``--telemetry on``, as shipped: metrics
and every 100th step traced) and trimmed as the servicer does. Python's
allocations that survive are counted per session, by the source line that
made them; gRPC's own per-stream memory (C, outside tracemalloc) is not in
it: bench/probes/bench_sessions.py measures the whole process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
from typing import Any

from harness.common import REPO, add_repo_to_path, bench_telemetry, write_result

add_repo_to_path()

from harness.loadgen import Sim  # noqa: E402

from trainprobe.sidecar.core.session import model  # noqa: E402
from trainprobe.sidecar.core.session.registry import Registry  # noqa: E402
from trainprobe.sidecar.transport import pb  # noqa: E402


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    if args.telemetry == "on":
        reg, tel = bench_telemetry("tp-structs-")
    else:
        reg, tel = Registry(), None
    sims = [
        Sim("load", r, args.sessions, args.steps_per_report, 1000, buckets=args.buckets)
        for r in range(args.sessions)
    ]
    msgs = [[s.report().SerializeToString() for _ in range(args.reports)] for s in sims]
    hellos = [pb.hello_from_pb(s.hello) for s in sims]
    from trainprobe.proto import probe_pb2

    # A tree from before the servicer trimmed applied reports: nothing to trim.
    trim = getattr(model, "trim_applied", lambda report: None)
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    for hello, raw in zip(hellos, msgs, strict=True):
        state = reg.open(hello, time.monotonic())
        for data in raw:
            report = pb.report_from_pb(probe_pb2.WorkerMessage.FromString(data).report)
            reg.apply(state, report, time.monotonic())
            if tel is not None:
                tel.on_report(state, report)
            trim(report)
    del msgs
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    root = str(REPO) + "/"
    top = [
        {
            "where": f"{s.traceback[0].filename.replace(root, '')}:{s.traceback[0].lineno}",
            "bytes_per_session": s.size_diff / args.sessions,
        }
        for s in stats[:15]
    ]
    if tel is not None:
        tel.pipeline.shutdown()
    return {"bytes_per_session": total / args.sessions, "top": top}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sessions", type=int, default=2000)
    p.add_argument("--reports", type=int, default=3)
    p.add_argument("--steps-per-report", type=int, default=20)
    p.add_argument(
        "--buckets", type=int, default=4, help="DDP allreduces a step (bench/harness/loadgen.py)"
    )
    p.add_argument("--telemetry", choices=["on", "off"], default="on")
    p.add_argument("--json", default="")
    args = p.parse_args()
    started = time.monotonic()
    data = asyncio.run(measure(args))
    print(f"{data['bytes_per_session'] / 1024:.1f} KiB a session (telemetry {args.telemetry}):")
    for row in data["top"]:
        print(f"  {row['bytes_per_session']:9.0f} B  {row['where']}")
    if args.json:
        write_result(args.json, "session_structures", {"params": vars(args), **data}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
