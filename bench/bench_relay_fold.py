"""What folding costs a relay node per hook report: parse, fold, serialize.

    python bench/bench_relay_fold.py [--workers 8] [--per-batch 5] [--batches 400]
        [--issue-times 8] [--repeats 5] [--json OUT]

Folding (relay/coalesce.py) moves work from the upstream to each node: the
node now parses every report, folds a worker's reports of one batch into one,
and serializes the result once per batch. This runs the node's own
``RelayBuffer`` and ``item_pb`` over real serialized reports (2 steps, the
issue times of ``--issue-times`` collectives, a phase, GPU memory: what
tests/unit/test_coalesce.py folds) for ``--workers`` streams, ``--per-batch``
reports each per batch (500 ms of a 10 Hz hook), and reports the loop's
thread CPU per hook report, the least of ``--repeats``.
"""

from __future__ import annotations

import argparse
import time

from harness.common import add_repo_to_path, write_result

add_repo_to_path()

from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.relay.buffer import Kind, RelayBuffer  # noqa: E402
from trainprobe.sidecar.relay.wire import item_pb  # noqa: E402

NS = 1_000_000_000


def report_bytes(k: int, issue_times: int) -> bytes:
    """The ``k``-th report of a worker, 100 ms after the previous one."""
    ns = int((100.0 + k / 10) * NS)
    r = probe_pb2.Report(
        seq=k,
        mono_ns=ns,
        wall_ns=ns,
        has_step=True,
        last_step=2 * k,
        last_step_mono_ns=ns - 1_000_000,
        total_steps=2 * k,
        step_stats=probe_pb2.StepStats(count=2, sum_s=0.1, max_s=0.06),
        recent_steps=[2 * k - 1, 2 * k],
        recent_step_end_mono_ns=[ns - 50_000_000, ns - 1_000_000],
        recent_step_s=[0.04, 0.06],
        gpu_memory=probe_pb2.GpuMemory(allocated_bytes=1 << 30, reserved_bytes=2 << 30),
    )
    if issue_times:
        first = (k - 1) * issue_times + 1
        r.sync.count, r.sync.p50_s, r.sync.max_s = issue_times, 0.001, 0.002
        r.sync.groups.add(
            group="default",
            issued=first + issue_times - 1,
            completed=first + issue_times - 1,
            started_seqs=range(first, first + issue_times),
            started_mono_ns=[ns - (40 - i) * 1_000_000 for i in range(issue_times)],
        )
    return probe_pb2.WorkerMessage(report=r).SerializeToString()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--per-batch", type=int, default=5)
    p.add_argument("--batches", type=int, default=400)
    p.add_argument("--issue-times", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default="")
    args = p.parse_args()
    started = time.monotonic()
    batches = [
        [report_bytes(b * args.per_batch + j + 1, args.issue_times) for j in range(args.per_batch)]
        for b in range(args.batches)
    ]
    reports = args.batches * args.per_batch * args.workers
    runs = []
    for _ in range(args.repeats):
        buf = RelayBuffer(20_000)
        t0 = time.thread_time()
        for batch in batches:
            for sid in range(1, args.workers + 1):
                for data in batch:
                    buf.add(sid, Kind.REPORT, data)
            probe_pb2.RelayBatch(items=[item_pb(i) for i in buf.take()[0]]).SerializeToString()
        runs.append((time.thread_time() - t0) / reports * 1e6)
    best = min(runs)
    per_node = best * args.workers * 10 / 1e6  # a 10 Hz hook per worker
    print(
        f"{best:.1f} µs of node CPU per hook report (runs {', '.join(f'{r:.1f}' for r in runs)}); "
        f"{per_node:.2%} of a core for {args.workers} workers at 10 Hz"
    )
    if args.json:
        write_result(
            args.json,
            "relay_fold",
            {"us_per_report": best, "runs_us": runs, "core_share": per_node},
            started,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
