"""A burst of stream opens, every one kept (real sidecar process, real gRPC).

Every rank of a large job opens its stream at once. gRPC core queues the calls
the server has not asked for yet, and grpc.aio asks for them one at a time
from the sidecar's loop; with gRPC's default limits (1,000 queued) the calls
beyond were cancelled at random right after their Hello (bench/bench_burst.py:
670 of 3,000). Here the sidecar is stopped (SIGSTOP) while 2,000 streams are
opened, so that all of them arrive in one burst when it resumes.
"""

from __future__ import annotations

import asyncio
import os
import signal

import grpc

from tests.support import SidecarProcess, short_tmpdir
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2, probe_pb2_grpc

STREAMS = 2000
PER_CHANNEL = 50


def hello(rank: int) -> probe_pb2.WorkerMessage:
    return probe_pb2.WorkerMessage(
        hello=probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            hook_version="test",
            job_id="burst",
            rank=rank,
            world_size=STREAMS,
            host="elsewhere",
            pid=os.getpid(),
            interval_ms=1000,
        )
    )


async def burst(sc: SidecarProcess) -> tuple[list[str], int]:
    """Open every stream while the sidecar is stopped: the codes of those that
    ended, and the sessions the sidecar holds."""
    assert sc.proc is not None
    channels = [
        grpc.aio.insecure_channel(sc.target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(STREAMS // PER_CHANNEL)
    ]
    await asyncio.gather(*(ch.channel_ready() for ch in channels))
    calls = [
        probe_pb2_grpc.SidecarStub(channels[i // PER_CHANNEL]).Connect() for i in range(STREAMS)
    ]
    os.kill(sc.proc.pid, signal.SIGSTOP)
    try:
        # Queued on the connections (the client's writes complete into socket buffers).
        writes = [asyncio.ensure_future(c.write(hello(i))) for i, c in enumerate(calls)]
        await asyncio.sleep(1.0)
    finally:
        os.kill(sc.proc.pid, signal.SIGCONT)
    await asyncio.gather(*writes, return_exceptions=True)
    stub = probe_pb2_grpc.SidecarStub(channels[0])

    async def sessions() -> int:
        try:
            st = await stub.GetStatus(probe_pb2.StatusRequest(job_id="burst"), timeout=30)
        except grpc.aio.AioRpcError:  # cancelled as the burst's calls are (before the fix)
            return 0
        return len(st.workers) + st.omitted

    held = 0
    for _ in range(120):
        held = await sessions()
        if held >= STREAMS or all(c.done() for c in calls):
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(1.0)
    ended = [(await c.code()).name for c in calls if c.done()]
    for c in calls:
        c.cancel()
    for ch in channels:
        await ch.close()
    return ended, held


def test_every_stream_of_a_burst_of_opens_is_kept() -> None:
    with SidecarProcess(short_tmpdir(), "--heartbeat-timeout-s", "3600") as sc:
        ended, held = asyncio.run(burst(sc))
        assert ended == [], f"{len(ended)} of {STREAMS} streams ended: {sorted(set(ended))}"
        assert held == STREAMS
        assert sc.proc is not None and sc.proc.poll() is None
