"""A sidecar far behind its reports judges no stepping worker (core/session/pace.py).

Real sidecar process, real gRPC streams, heartbeat limit lowered to 3 s (the
shipped 10 s would need a backlog past 13 s). Two simulated workers of one
job report every 0.1 s, each report stamped when it was made. After a
warm-up on time, the reports reach the sidecar later and later, up to
BACKLOG_S after they were made: the backlog of a sidecar starved on a small
machine (2,000
workers at 10 Hz on 2 shared cores left it 11.7 s behind), made on demand
rather than by starving it on this shared machine. The backlog is longer
than the heartbeat limit, which bounds how far a worker's ages are judged as
of its sends, so before the sidecar measured its own lateness both stepping
ranks looked stalled.

The sidecar must say it is behind (status, the ``trainprobe.ingest`` health
service), judge no stepping rank, and still judge rank 1 HUNG once it stops
stepping, with the latency counted from its last step.
"""

from __future__ import annotations

import heapq
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import SidecarProcess, short_tmpdir
from tests.test_overload_e2e import PERIOD_S, SimWorker, report_for
from trainprobe.proto import probe_pb2_grpc

BACKLOG_S = 7.0
FLAGS = ("--heartbeat-timeout-s", "3", "--on-hung", "observe", "--on-unresponsive", "observe")


def backlogged(workers: list[SimWorker], seconds: float) -> None:
    """Make a report per worker every PERIOD_S for ``seconds``; each is sent
    later than the one before, as a sidecar falling behind reads them: the lag
    grows by one second a second up to BACKLOG_S, then stays."""
    due: list[tuple[float, int, int, object]] = []
    start = time.monotonic()
    end = start + seconds + BACKLOG_S
    n = 0
    while (now := time.monotonic()) < end:
        if now < start + seconds:
            lag = min(BACKLOG_S, now - start)
            for w in workers:
                n += 1
                heapq.heappush(due, (now + lag, n, w.rank, w.make()))
        while due and due[0][0] <= now:
            _, _, rank, msg = heapq.heappop(due)
            workers[rank].q.put(msg)
        time.sleep(PERIOD_S)


def test_a_sidecar_behind_its_reports_by_more_than_the_heartbeat_judges_no_stepping_rank() -> None:
    workdir = short_tmpdir()
    with SidecarProcess(workdir, *FLAGS) as sc, grpc.insecure_channel(sc.target) as ch:
        stub = probe_pb2_grpc.SidecarStub(ch)
        health = health_pb2_grpc.HealthStub(ch)
        workers = [SimWorker(stub, 0), SimWorker(stub, 1)]
        try:
            report_for(workers, 3.0)  # on time: past the 20-step warm-up
            # Rank 1 hangs 12 s into the backlog; its reports keep coming, as late.
            hang = threading.Timer(12.0, lambda: setattr(workers[1], "stepping", False))
            hang.start()
            backlogged(workers, 20.0)
            ingest = sc.status("flood").ingest
            served = health.Check(health_pb2.HealthCheckRequest(service="trainprobe.ingest"))
            hung = sc.wait_incident(lambda r: r.get("verdict") == "HUNG", 15)
        finally:
            for w in workers:
                w.q.put(None)
    false = [r for r in sc.incidents() if 0 in r.get("ranks", [])]
    assert false == [], false
    assert hung["ranks"] == [1], hung
    truth = hung["time"] - workers[1].last_step_wall
    assert abs(hung["detection_latency_s"] - truth) < 0.5, (hung["detection_latency_s"], truth)
    assert truth >= 3.0 + BACKLOG_S  # the stall threshold, read BACKLOG_S late
    # What the sidecar said while behind: its lateness, what it deferred (both
    # ranks' stalls while they stepped), and the ingest health service.
    assert ingest.behind and BACKLOG_S <= ingest.own_lag_s <= 1.1 * BACKLOG_S + 0.5, ingest
    assert ingest.deferred >= 2, ingest
    assert served.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert "sidecar is behind its own reports" in sc.log_text()
