"""The simulated node sidecars of bench_summary_sync.py: its load processes.

Each load process (:func:`load`) keeps one real JobSync stream per simulated
node (:func:`node`) over the upstream's Unix socket and runs the node's own
code for it: every 500 ms a round of healthy rank summaries (a step every
200 ms, collectives briefly in flight; once rank 0 stops, every other rank
blocked in the allreduce it never joins), what to ask from
:class:`~trainprobe.sidecar.core.job.view.JobView`, what to send from
:class:`~trainprobe.sidecar.core.job.uplink.Uplink`, the answers applied to the
view. Node 1 also runs the culprit analysis after every answer; node 0's
rank 0 stops once the measuring process sets ``stop_at``. What they count
goes to shared counters, ``K`` a process.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from typing import Any

from harness.common import add_repo_to_path

add_repo_to_path()

import grpc  # noqa: E402

from trainprobe.proto import probe_pb2 as pb  # noqa: E402
from trainprobe.sidecar.core.job.uplink import Uplink  # noqa: E402
from trainprobe.sidecar.core.job.view import JobView, analyze_job  # noqa: E402
from trainprobe.sidecar.core.judge.diagnosis import GroupProgress, RankSummary  # noqa: E402
from trainprobe.sidecar.sync.wire import reply_of, upload_pb  # noqa: E402

__all__ = ["JOB", "K", "load", "raise_fds"]

JOB = "bench"
INTERVAL_S = 0.5
REFRESH_S = 3.0
METHOD = "/trainprobe.v1.Sidecar/JobSync"
#: Per load process in the shared counters: up, sent, received, named (ms), false
#: culprits, and when node 0 sent its stopped rank (ms after the onset).
K = 6


def raise_fds() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _summary(
    rank: int, world: int, t: float, stopped_at: float | None, onset: float | None = None
) -> RankSummary:
    if onset is not None and t >= onset and stopped_at is None:
        # The others of a real hang: blocked in the allreduce the stopped rank never
        # joins, their hooks still reporting, nothing else changing.
        frozen = int(onset / 0.2)
        seq, age = frozen * 2, t - onset
        return RankSummary(
            rank, world, host=f"n{rank // 8}", pid=1000 + rank, report_age_s=(t % 1.0) / 10,
            has_step=True, step=frozen, step_age_s=age, verified=True, normal_step_s=1.0,
            groups=(GroupProgress("default", seq + 1, seq, age, "allreduce", seq + 1),),
        )  # fmt: skip
    step = int(t / 0.2)
    seq = step * 2
    if stopped_at is not None and t >= stopped_at:
        age = t - stopped_at
        frozen = int(stopped_at / 0.2)
        return RankSummary(
            rank, world, host=f"n{rank // 8}", pid=1000 + rank, reporting=False,
            report_age_s=age, has_step=True, step=frozen, step_age_s=age,
            groups=(GroupProgress("default", frozen * 2, frozen * 2),), verdict="UNRESPONSIVE",
            verified=True, normal_step_s=1.0, kernel="stopped", kernel_age_s=0.1,
        )  # fmt: skip
    inflight = 0.01 if (rank + step) % 3 == 0 else None
    return RankSummary(
        rank, world, host=f"n{rank // 8}", pid=1000 + rank, report_age_s=(t % 1.0) / 10,
        has_step=True, step=step, step_age_s=t % 0.2, verified=True, normal_step_s=1.0,
        groups=(GroupProgress("default", seq + (inflight is not None), seq, inflight,
                              "allreduce" if inflight else "", seq + 1),),
    )  # fmt: skip


async def node(
    i: int, per: int, world: int, target: str, t0: float, stop_at: Any, stats: dict[str, Any]
) -> None:
    view, uplink = JobView(), Uplink(REFRESH_S)
    ranks = range(i * per, (i + 1) * per)
    async with grpc.aio.insecure_channel(target) as ch:
        call = ch.stream_stream(
            METHOD,
            request_serializer=pb.JobSyncUp.SerializeToString,
            response_deserializer=pb.JobSyncDown.FromString,
        )()

        async def read() -> None:
            async for down in call:
                stats["received"] += 1
                for j in down.jobs:
                    uplink.answered(j.job_id)
                    view.update(j.job_id, reply_of(j), time.monotonic())
                if i == 1 and not stats["named_after"]:
                    now = time.monotonic()
                    remote = view.remote(JOB, now, 3 * REFRESH_S)
                    onset = stop_at.value - t0 if stop_at.value > 0 else None
                    mine = [_summary(r, world, now - t0, None, onset) for r in ranks]
                    verdict = view.verdict(JOB)
                    if verdict is not None:  # a large job: the upstream's verdict is the analysis
                        d = verdict.diagnosis(False)
                    else:
                        d = analyze_job([*mine, *remote]) if remote else None
                    if d is not None and d.culprits and not stats["onset"]:
                        stats["false"] += 1  # a healthy job's culprit
                    elif d is not None and 0 in d.culprits and stats["onset"]:
                        stats["named_after"] = now - stats["onset"]

        reader = asyncio.ensure_future(read())
        reader.add_done_callback(
            lambda t: (
                t.cancelled() or t.exception() is None or print(f"node {i}: {t.exception()!r}")
            )
        )
        stats["up"] += 1
        await asyncio.sleep((i % 50) * INTERVAL_S / 50)  # spread the rounds
        while not reader.done():
            now = time.monotonic()
            onset = stop_at.value - t0 if stop_at.value > 0 else None
            stopped = onset if i == 0 else None
            mine = [_summary(r, world, now - t0, stopped if r == ranks[0] else None, onset)
                    for r in ranks]  # fmt: skip
            detail, since = view.ask(JOB, mine, False, now)
            pushed = [JOB] if view.judged_upstream(JOB, len(mine)) else []  # as sync/link.py
            ups = uplink.uploads({JOB: (mine, None, detail, since)}, now, view.bounded, pushed)
            if ups:
                await call.write(
                    pb.JobSyncUp(node_id=f"node-{i}", refresh_s=REFRESH_S,
                                 jobs=[upload_pb(u) for u in ups])
                )  # fmt: skip
                stats["sent"] += 1
                if stopped and not stats["stop_sent"]:
                    stats["stop_sent"] = time.monotonic() - stop_at.value
            await asyncio.sleep(INTERVAL_S)


def load(
    p: int, nodes: range, per: int, world: int, target: str, cpus: set[int], counters: Any,
    stop_at: Any,
) -> None:  # fmt: skip
    """One load process: its nodes' streams; its counters at K * p (see K)."""
    raise_fds()
    if cpus:
        os.sched_setaffinity(0, cpus)
    stats: dict[str, Any] = {"up": 0, "sent": 0, "received": 0, "onset": 0.0, "named_after": 0.0}
    stats["false"], stats["stop_sent"] = 0, 0.0
    t0 = time.monotonic()

    async def main() -> None:
        tasks = [
            asyncio.ensure_future(node(i, per, world, target, t0, stop_at, stats)) for i in nodes
        ]
        while not all(t.done() for t in tasks):
            await asyncio.sleep(0.2)
            if stop_at.value > 0 and not stats["onset"]:
                stats["onset"] = stop_at.value
            with counters.get_lock():
                counters[K * p] = stats["up"]
                counters[K * p + 1] = stats["sent"]
                counters[K * p + 2] = stats["received"]
                counters[K * p + 3] = int(stats["named_after"] * 1000)
                counters[K * p + 4] = stats["false"]
                counters[K * p + 5] = int(stats["stop_sent"] * 1000)

    asyncio.run(main())
