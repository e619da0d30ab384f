"""A sidecar whose reports come seconds late sheds them and still judges (issue 21).

Real sidecar process (shipped rules, actions ``observe``: the simulated
workers are no processes of this host), real gRPC streams. Two simulated
workers of one job report every 0.1 s, each report stamped when it was made.
After a warm-up on time, their reports reach the sidecar in bursts of 2 s,
the oldest of each burst 2 s after it was made: the backlog of a sidecar that
fell behind, as the sidecar sees it, made on demand rather than by starving
it on a shared machine. Rank 1 then stops stepping while its reports keep
coming.

The sidecar must shed (status and the ``trainprobe.ingest`` health service
say so), must not judge the stepping rank 0, must judge rank 1 HUNG, and
that incident's detection latency must count from rank 1's last step as its
reports show it.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import SidecarProcess, short_tmpdir, wait_for
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2, probe_pb2_grpc

PERIOD_S = 0.1
BURST_S = 2.0


class SimWorker:
    """One simulated worker's Connect stream, fed from a queue."""

    def __init__(self, stub: probe_pb2_grpc.SidecarStub, rank: int) -> None:
        self.rank = rank
        self.step = 0
        self.stepping = True
        self.last_step_ns = 0
        self.last_step_wall = 0.0
        self.seq = 0
        self.q: queue.Queue[Any] = queue.Queue()
        hello = probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            hook_version="test",
            job_id="flood",
            rank=rank,
            world_size=2,
            host="elsewhere",  # not this host: never signalled
            pid=os.getpid() + 100_000 + rank,
            interval_ms=int(PERIOD_S * 1000),
        )
        self.q.put(probe_pb2.WorkerMessage(hello=hello))
        self.call = stub.Connect(self._messages())
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _messages(self) -> Iterator[probe_pb2.WorkerMessage]:
        while (msg := self.q.get()) is not None:
            yield msg

    def _drain(self) -> None:
        try:
            for _ in self.call:  # commands (stack requests): left unanswered
                pass
        except grpc.RpcError:
            pass

    def make(self) -> probe_pb2.WorkerMessage:
        """A report made now (stamped now), stepping unless stopped."""
        now = time.monotonic_ns()
        self.seq += 1
        rep = probe_pb2.Report(seq=self.seq, mono_ns=now, wall_ns=time.time_ns(), has_step=True)
        if self.stepping:
            self.step += 1
            self.last_step_ns, self.last_step_wall = now, time.time()
            rep.recent_steps.append(self.step)
            rep.recent_step_end_mono_ns.append(now)
            rep.recent_step_s.append(PERIOD_S)
            rep.step_stats.count, rep.step_stats.sum_s = 1, PERIOD_S
            rep.step_stats.max_s = PERIOD_S
        rep.last_step = rep.total_steps = self.step
        rep.last_step_mono_ns = self.last_step_ns
        return probe_pb2.WorkerMessage(report=rep)


def report_for(workers: list[SimWorker], seconds: float, burst_s: float = 0.0) -> None:
    """Make a report per worker every PERIOD_S for ``seconds``; send them at
    once every ``burst_s`` (0: as made)."""
    held: list[tuple[SimWorker, probe_pb2.WorkerMessage]] = []
    end = time.monotonic() + seconds
    flushed = time.monotonic()
    while time.monotonic() < end:
        for w in workers:
            held.append((w, w.make()))
        if time.monotonic() - flushed >= burst_s:
            for w, msg in held:
                w.q.put(msg)
            held.clear()
            flushed = time.monotonic()
        time.sleep(PERIOD_S)
    for w, msg in held:
        w.q.put(msg)


def test_a_backlogged_sidecar_sheds_and_still_judges() -> None:
    workdir = short_tmpdir()
    flags = ("--on-hung", "observe", "--on-unresponsive", "observe")
    with SidecarProcess(workdir, *flags) as sc, grpc.insecure_channel(sc.target) as ch:
        stub = probe_pb2_grpc.SidecarStub(ch)
        health = health_pb2_grpc.HealthStub(ch)
        workers = [SimWorker(stub, 0), SimWorker(stub, 1)]
        try:
            report_for(workers, 4.0)  # on time: past the 20-step warm-up
            assert sc.status("flood").ingest.shed == 0
            report_for(workers, 3 * BURST_S, burst_s=BURST_S)  # backlogged
            ingest = wait_for(lambda: (s := sc.status("flood").ingest).shed and s, 30, what="shed")
            assert ingest.overloaded and ingest.max_lag_s > 1.0
            assert ingest.applied > 0
            served = health.Check(health_pb2.HealthCheckRequest(service="trainprobe.ingest"))
            assert served.status == health_pb2.HealthCheckResponse.NOT_SERVING
            assert "sidecar OVERLOADED" in format_status(sc)
            # Rank 1 hangs inside a backlog: its reports still come, late.
            workers[1].stepping = False
            report_for(workers, BURST_S, burst_s=BURST_S)
            report_for(workers, 8.0)  # on time again
            hung = sc.wait_incident(lambda r: r.get("verdict") == "HUNG", 30)
        finally:
            for w in workers:
                w.q.put(None)
    assert hung["ranks"] == [1], hung
    # Rank 1's last step was made at last_step_wall; the verdict came at hung["time"].
    truth = hung["time"] - workers[1].last_step_wall
    assert abs(hung["detection_latency_s"] - truth) < 0.5, (hung["detection_latency_s"], truth)
    assert truth >= 3.0  # the stall threshold (3 s floor) at least
    false = [r for r in sc.incidents() if 0 in r.get("ranks", [])]
    assert false == [], false


def format_status(sc: SidecarProcess) -> str:
    from trainprobe.sidecar.cli.ctl import format_status as fmt

    return fmt(sc.status("flood"))
