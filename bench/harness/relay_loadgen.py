"""Load generator for the relayed scale benchmark: simulated relay nodes.

    python bench/harness/relay_loadgen.py --target unix:///path --workers 1000 --per-node 8
        --hz 10 --rank-offset 0 --world-size 4000 --ready FILE --stop FILE
        --out result.json [--probes 2] [--steps-per-report 2] [--fill 1000]
        [--interval-ms 100]

Like bench/harness/loadgen.py, but what reaches the measured sidecar is what node
sidecars in relay mode (``--relay-to``) send: each simulated node has one
``Relay`` stream and ``--per-node`` workers, each making a report every
``1/hz`` seconds at its own phase, and every ``--interval-ms`` (the node's
``relay_interval_ms``) the node sends one ``RelayBatch`` carrying every report
its workers made since its previous batch, oldest first (10 Hz workers at
200 ms: two reports per worker per batch), through the node's own buffer, so
that each worker's reports in a batch are folded into one as a real node
folds them (``relay/coalesce.py``). Counts are of the reports the workers
made, before folding. The first batch holds every
worker's Hello and a first report with ``fill`` step times. ``--issue-times
K`` adds collective issue times to every report, as bench/harness/loadgen.py does.

To produce 20k+ reports/s from one core, each worker keeps one pre-built
``WorkerMessage`` whose few changing fields (seq, clocks, steps) are set in
place before it is serialized, and each node one pre-built ``RelayBatch``.

Probes are extra workers (each its own job) on one extra node per generator:
once a second, for 300 ms, their reports declare a phase 10 s past its 1 s
timeout. Two times are written out per probe report: when its node sent the
batch carrying it (``probe_sends``: what the measured upstream receives, give
or take the socket; the primary lag counts from here), and when its worker
made it (``probe_made``: each worker has its own phase in the node's interval,
as a real hook does, so a lag from here also includes the node's batching
delay, 0 to one interval, which is not the upstream's doing). With several
reports per worker in a batch, all of a probe's reports in the batch that
opens its overrun carry it, and ``probe_made`` is the oldest of them.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Iterable
from pathlib import Path

# Run as a file (python bench/harness/relay_loadgen.py) its own folder is on sys.path,
# not bench/: the harness package is imported from bench/ as everywhere else.
_BENCH = str(Path(__file__).resolve().parents[1])
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

import grpc  # noqa: E402

from harness.loadgen import Run, Sim, build_parser, end_call, finish, run_generator  # noqa: E402
from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.relay.buffer import Kind, RelayBuffer  # noqa: E402
from trainprobe.sidecar.relay.wire import item_pb  # noqa: E402

RELAY = "/trainprobe.v1.Sidecar/Relay"
NODES_PER_CHANNEL = 8


class FastSim(Sim):
    """A worker whose reports are one template updated in place."""

    def __init__(
        self, job: str, rank: int, world: int, k: int, fill: int, issue_times: int = 0
    ) -> None:
        super().__init__(job, rank, world, k, fill, issue_times)
        self.hello_bytes = probe_pb2.WorkerMessage(hello=self.hello).SerializeToString()
        self.msg = probe_pb2.WorkerMessage(report=probe_pb2.Report(has_step=True))
        self.dt = 0.05 + random.random() * 0.01
        rep = self.msg.report
        rep.step_stats.count, rep.step_stats.sum_s, rep.step_stats.max_s = k, k * self.dt, self.dt
        rep.recent_step_s.extend([self.dt] * k)
        if issue_times:
            rep.sync.count = issue_times
            rep.sync.groups.add(group="default")
        #: This worker's moment in its node's interval (0..1): when it "sends".
        self.phase = random.random()

        #: Monotonic time (s) of this worker's next report; set by its node.
        self.next_made = 0.0

    def next_bytes(self, now_ns: int, wall_ns: int) -> bytes:
        self.seq += 1
        self.step += self.k
        rep = self.msg.report
        rep.seq, rep.mono_ns, rep.wall_ns = self.seq, now_ns, wall_ns
        rep.last_step, rep.last_step_mono_ns, rep.total_steps = self.step, now_ns, self.step
        dt_ns = int(self.dt * 1e9)
        rep.recent_steps[:] = range(self.step - self.k + 1, self.step + 1)
        rep.recent_step_end_mono_ns[:] = [now_ns - (self.k - 1 - i) * dt_ns for i in range(self.k)]
        c = self.issue_times
        if c:  # as Sim.report: the same seqs on every rank, rank 7 enters 20 ms late
            first = (self.seq - 1) * c + 1
            grp = rep.sync.groups[0]
            grp.issued = grp.completed = first + c - 1
            grp.started_seqs[:] = range(first, first + c)
            grp.started_mono_ns[:] = [now_ns - (c - i) * 1_000_000 + self.late_ns for i in range(c)]
        return self.msg.SerializeToString()


def relayed(reports: Iterable[tuple[int, bytes]]) -> list[probe_pb2.RelayItem]:
    """``(stream id, WorkerMessage bytes)`` reports as a relay node batches them."""
    buf = RelayBuffer(1 << 30)
    for sid, data in reports:
        buf.add(sid, Kind.REPORT, data)
    return [item_pb(item) for item in buf.take()[0]]


def made_since(sims: list[FastSim], mono: float, period: float) -> list[tuple[float, int]]:
    """(made at, stream id) of every report ``sims`` made up to ``mono``, oldest first."""
    made = []
    for sid, sim in enumerate(sims, 1):
        while sim.next_made <= mono:
            made.append((sim.next_made, sid))
            sim.next_made += period
    made.sort()
    return made


async def run_node(
    channel: grpc.aio.Channel,
    sims: list[FastSim],
    period: float,
    interval: float,
    run: Run,
    probes: dict[str, list[float]] | None,
    made: dict[str, list[float]] | None = None,
) -> None:
    call = channel.stream_stream(
        RELAY,
        request_serializer=probe_pb2.RelayBatch.SerializeToString,
        response_deserializer=probe_pb2.RelayCommand.FromString,
    )()
    first = probe_pb2.RelayBatch()
    for sid, sim in enumerate(sims, 1):
        first.items.add(stream_id=sid, message=sim.hello_bytes)
        first.items.add(stream_id=sid, message=sim.report().SerializeToString())
    await call.write(first)
    run.first_sent += len(sims)
    if run.first_sent == run.workers:
        run.all_first.set()
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    for sim in sims:
        sim.next_made = start + sim.phase * period
    next_t = loop.time() + random.random() * interval
    cycle = 0.0
    while not run.stopped:
        await asyncio.sleep(max(0.0, next_t - loop.time()))
        next_t += interval
        wall, mono = time.time(), time.monotonic()
        made_list = made_since(sims, mono, period)
        batch = probe_pb2.RelayBatch(interval_ms=round(interval * 1000))
        if probes is None:
            offset_ns = int((wall - mono) * 1e9)
            batch.items.extend(
                relayed(
                    (sid, sims[sid - 1].next_bytes(int(t * 1e9), offset_ns + int(t * 1e9)))
                    for t, sid in made_list
                )
            )
        else:
            carried = {sid for _, sid in made_list}
            first_of_cycle = (
                run.all_first.is_set() and wall - cycle >= 1.0 and len(carried) == len(sims)
            )
            if first_of_cycle:
                cycle = wall
            overrun = wall - cycle < 0.3
            batch.items.extend(
                relayed(
                    (sid, sims[sid - 1].report(overrun=overrun).SerializeToString())
                    for _, sid in made_list
                )
            )
            if first_of_cycle:
                sent = time.time()  # the batch leaves now: the upstream's receipt
                for sid, sim in enumerate(sims, 1):
                    probes[sim.hello.job_id].append(sent)
                    if made is not None:  # when its hook made the first carrying it
                        oldest = min(t for t, s in made_list if s == sid)
                        made[sim.hello.job_id].append(wall - (mono - oldest))
        await call.write(batch)
        run.count_n(wall, len(made_list))
    await call.done_writing()
    await end_call(call)


class CountingRun(Run):
    def count_n(self, wall: float, n: int) -> None:
        b = int(wall * 10)
        self.buckets[b] = self.buckets.get(b, 0) + n


async def main_async(args: argparse.Namespace) -> dict:
    k, fill, world = args.steps_per_report, args.fill, args.world_size
    sims = [
        FastSim("load", args.rank_offset + i, world, k, fill, args.issue_times)
        for i in range(args.workers)
    ]
    nodes = [sims[i : i + args.per_node] for i in range(0, len(sims), args.per_node)]
    probes: dict[str, list[float]] = {}
    made: dict[str, list[float]] = {}
    probe_sims = []
    for i in range(args.probes):
        job = f"probe-{args.rank_offset}-{i}"
        probes[job], made[job] = [], []
        probe_sims.append(FastSim(job, 0, 1, k, 0))
    run = CountingRun(len(sims) + len(probe_sims))
    channels: list[grpc.aio.Channel] = []
    tasks = []
    period, interval = 1.0 / args.hz, args.interval_ms / 1000.0
    plan: list[tuple[list[FastSim], dict[str, list[float]] | None]] = [(n, None) for n in nodes]
    if probe_sims:
        plan.append((probe_sims, probes))
    for idx, (node, node_probes) in enumerate(plan):
        if idx % NODES_PER_CHANNEL == 0:
            opts = [("grpc.use_local_subchannel_pool", 1)]
            channels.append(grpc.aio.insecure_channel(args.target, options=opts))
        node_made = made if node_probes is not None else None
        tasks.append(run_node(channels[-1], node, period, interval, run, node_probes, node_made))
    result = await finish(run, tasks, channels, probes, args)
    result["probe_made"] = made
    return result


if __name__ == "__main__":
    parser = build_parser(__doc__)
    parser.add_argument("--per-node", type=int, default=8, help="workers per simulated node")
    parser.add_argument(
        "--interval-ms", type=float, default=100.0, help="each node's relay_interval_ms"
    )
    sys.exit(run_generator(main_async, parser.parse_args()))
