"""Load generator for the scale benchmark: simulated workers over real gRPC.

    python bench/harness/loadgen.py --target unix:///path --workers 500 --hz 10
        --rank-offset 0 --world-size 2000 --ready FILE --stop FILE --out result.json
        [--probes 2] [--steps-per-report 2] [--fill 1000] [--issue-times 0]

Each simulated worker opens its own ``Connect`` stream, sends a ``Hello`` as
rank ``rank-offset + i`` of one job (``load``), then a ``Report`` every
``1/hz`` seconds with ``steps-per-report`` new steps, like a hook whose job
runs that many steps per report interval. Its first report also carries
``fill`` step times (of earlier steps), so the sidecar's per-worker state is
at its steady-state size from the start. Once every worker has sent its first
report the ``--ready`` file appears; the generator runs until the ``--stop``
file does, then writes how many reports it sent in each 100 ms bucket.
Workers are spread over one connection per 50 of them
(``grpc.use_local_subchannel_pool`` keeps them apart).

With ``--issue-times K`` each report also carries the default group's
counters and the issue times of K new collectives (the same sequence numbers
on every worker, as ``watch_ddp`` reports them; rank 7 enters each 20 ms
late), so the sidecar's arrival-lag comparisons run at scale.

Probes are extra workers, each its own job. Once a second, for 300 ms (so
that at least one tick sees it), their reports declare a phase that is
already 10 s past its 1 s timeout: a report that implies a HUNG verdict at
the sidecar's next tick. The send time of each such first report is written
out, so the scale benchmark can measure the lag from report to verdict.
One worker's reports are :class:`sim_worker.Sim`'s (imported from here by the
benchmarks that make reports in process).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

# Run as a file (python bench/harness/loadgen.py) its own folder is on sys.path,
# not bench/: the harness package is imported from bench/ as everywhere else.
_BENCH = str(Path(__file__).resolve().parents[1])
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

import grpc  # noqa: E402

from harness.sim_worker import Sim  # noqa: E402
from trainprobe.proto import probe_pb2, probe_pb2_grpc  # noqa: E402

STREAMS_PER_CHANNEL = 50
#: What a probe answers when the sidecar asks for its stacks.
PROBE_STACKS = (
    'Thread 0x1 "MainThread" (most recent call last):\n  File "loadgen.py", line 1, in probe\n'
)


class Run:
    """Shared state of one generator process."""

    def __init__(self, workers: int) -> None:
        self.stopped = False
        self.first_sent = 0
        self.workers = workers
        self.buckets: dict[int, int] = {}
        self.all_first = asyncio.Event()
        #: (rank, wall time) of each stream this generator lost before its stop.
        self.lost: list[tuple[int, float]] = []

    def count(self, wall: float) -> None:
        b = int(wall * 10)
        self.buckets[b] = self.buckets.get(b, 0) + 1


async def run_sim(
    stub: probe_pb2_grpc.SidecarStub,
    sim: Sim,
    period: float,
    run: Run,
    probe_sends: list[float] | None,
) -> None:
    call = stub.Connect()
    try:
        await _run_call(call, sim, period, run, probe_sends)
    except Exception as err:
        # "RPC already finished" says nothing: the call's own status says who ended it.
        if not call.done():
            raise
        if not run.stopped:
            run.lost.append((sim.hello.rank, time.time()))
        code, details = await call.code(), await call.details()
        raise RuntimeError(
            f"{type(err).__name__} at {time.time():.1f}: stream ended {code.name}: {details}"
        ) from err


async def _run_call(
    call: Any, sim: Sim, period: float, run: Run, probe_sends: list[float] | None
) -> None:
    lock = asyncio.Lock()  # one write at a time on the stream
    await call.write(probe_pb2.WorkerMessage(hello=sim.hello))
    await call.write(sim.report())
    answers = asyncio.ensure_future(answer_commands(call, lock)) if probe_sends else None
    run.first_sent += 1
    if run.first_sent == run.workers:
        run.all_first.set()
    loop = asyncio.get_running_loop()
    next_t = loop.time() + random.random() * period
    cycle = 0.0
    while not run.stopped:
        await asyncio.sleep(max(0.0, next_t - loop.time()))
        next_t += period
        wall = time.time()
        first = probe_sends is not None and run.all_first.is_set() and wall - cycle >= 1.0
        if first:
            cycle = wall
        async with lock:
            await call.write(sim.report(overrun=probe_sends is not None and wall - cycle < 0.3))
        if first:
            probe_sends.append(wall)  # type: ignore[union-attr]
        run.count(wall)
    if answers is not None:
        answers.cancel()
    async with lock:
        await call.write(probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye(reason="loadgen done")))
    await call.done_writing()
    await end_call(call)


async def end_call(call: Any, timeout_s: float = 10.0) -> None:
    """Wait for the sidecar to end the stream after the Goodbye, as the hook does.

    A cancel right after ``done_writing`` can overtake the Goodbye: the sidecar
    then sees the stream vanish, and a vanished rank whose process is gone is
    DEAD (rule ``exit``), which the benchmark used to count as false incidents.
    """
    try:
        await asyncio.wait_for(call.code(), timeout_s)
    except asyncio.TimeoutError:
        call.cancel()


async def answer_commands(call: Any, lock: asyncio.Lock) -> None:
    """Answer the sidecar's stack requests as a live hook does, within
    milliseconds: its hang path reads a probe's stacks before it publishes."""
    with contextlib.suppress(Exception):
        async for command in call:
            if command.HasField("dump_stacks"):
                result = probe_pb2.CommandResult(
                    command_id=command.id, ok=True, python_stacks=PROBE_STACKS
                )
                async with lock:
                    await call.write(probe_pb2.WorkerMessage(command_result=result))


async def watch(run: Run, ready: Path, stop: Path) -> None:
    await run.all_first.wait()
    ready.touch()
    while not stop.exists():
        await asyncio.sleep(0.1)
    run.stopped = True


async def main_async(args: argparse.Namespace) -> dict:
    channels = []
    sims: list[tuple[Sim, list[float] | None]] = []
    for i in range(args.workers):
        rank = args.rank_offset + i
        sim = Sim(
            args.job, rank, args.world_size, args.steps_per_report, args.fill, args.issue_times
        )
        sims.append((sim, None))
    probes: dict[str, list[float]] = {}
    for i in range(args.probes):
        job = f"probe-{args.rank_offset}-{i}"
        probes[job] = []
        sims.append((Sim(job, 0, 1, args.steps_per_report, 0), probes[job]))
    run = Run(len(sims))
    tasks = []
    for idx, (sim, sends) in enumerate(sims):
        if idx % STREAMS_PER_CHANNEL == 0:
            ch = grpc.aio.insecure_channel(
                args.target, options=[("grpc.use_local_subchannel_pool", 1)]
            )
            channels.append(ch)
        stub = probe_pb2_grpc.SidecarStub(channels[-1])
        tasks.append(run_sim(stub, sim, 1.0 / args.hz, run, sends))
    return await finish(run, tasks, channels, probes, args)


async def finish(
    run: Run,
    tasks: list[Coroutine[Any, Any, None]],
    channels: list[grpc.aio.Channel],
    probes: dict[str, list[float]],
    args: argparse.Namespace,
) -> dict:
    """Run the simulated streams until the stop file appears; the generator's result."""
    watcher = asyncio.ensure_future(watch(run, Path(args.ready), Path(args.stop)))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    watcher.cancel()
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    # The distinct endings first: one example of each kind, then the rest.
    kinds: dict[str, str] = {}
    for e in errors:
        kinds.setdefault(e.split(": stream ended ")[-1][:120], e)
    errors = list(kinds.values()) + [e for e in errors if e not in kinds.values()]
    for ch in channels:
        await ch.close()
    return {
        "buckets": {str(k): v for k, v in sorted(run.buckets.items())},
        "probe_sends": probes,
        "errors": errors[:5],
        "lost": run.lost,
        "n_errors": len(errors),
    }


def build_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every load generator takes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--rank-offset", type=int, default=0)
    p.add_argument("--job", default="load", help="the simulated workers' job id")
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--ready", required=True, help="touched once every worker has reported")
    p.add_argument("--stop", required=True, help="the generator stops when this file exists")
    p.add_argument("--probes", type=int, default=0)
    p.add_argument("--steps-per-report", type=int, default=2)
    p.add_argument("--fill", type=int, default=1000)
    p.add_argument("--issue-times", type=int, default=0, help="collective issue times per report")
    p.add_argument("--out", required=True)
    return p


def run_generator(
    main: Callable[[argparse.Namespace], Coroutine[Any, Any, dict]], args: argparse.Namespace
) -> int:
    """Run ``main`` and write its result, with this process's CPU time, to ``--out``."""
    t0 = time.process_time()
    result = asyncio.run(main(args))
    result["cpu_s"] = time.process_time() - t0
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(run_generator(main_async, build_parser(__doc__).parse_args()))
