"""Hypothesis strategies for hostile wire input: Hello, Report, WorkerMessage, bytes.

Shared by tests/test_fuzz_sidecar.py (a few thousand cases in ``make test``)
and bench/bench_fuzz_soak.py (tens of thousands, with RSS sampled).

What the fuzz leaves to the impostor suite (issue 13's identity half): a
claimed pid is never one that can exist (above Linux's PID_MAX_LIMIT), and
the real worker's job is only ever claimed for its own rank, so the fuzz
tests the bounds and the parser, not whose word a pid is.
"""

from __future__ import annotations

import math
import socket
from typing import Any

import grpc
from hypothesis import strategies as st

from trainprobe.proto import probe_pb2

#: The job of the real worker every fuzz run keeps connected.
VICTIM_JOB = "victim"
#: Linux's PID_MAX_LIMIT on 64-bit: no process ever has a pid above it.
PID_MAX_LIMIT = 4 * 1024 * 1024

INT32 = st.integers(-(2**31), 2**31 - 1)
UINT32 = st.integers(0, 2**32 - 1)
INT64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-5, 10**6))
UINT64 = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 10**6))
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e-9, 0.05, 1e300, math.nan, math.inf]),
)
# Mostly short, now and then over every limit (a few KiB: the 4 MiB wire
# limit itself is tests/test_bad_input.py's).
TEXT = st.one_of(
    st.text(max_size=24),
    st.text(max_size=300),
    st.integers(250, 5000).map(lambda n: "x" * n),
)
IDS = st.one_of(st.sampled_from(["j0", "j1", "job", ""]), TEXT)
NOW_NS = st.integers(1, 2**62)


def _job_and_rank() -> st.SearchStrategy[tuple[str, int]]:
    others = st.tuples(IDS.filter(lambda j: j != VICTIM_JOB), INT32)
    return st.one_of(others, st.just((VICTIM_JOB, 0)))


@st.composite
def hellos(draw: st.DrawFn) -> probe_pb2.Hello:
    job, rank = draw(_job_and_rank())
    host = draw(st.one_of(st.just(socket.gethostname()), TEXT))
    return probe_pb2.Hello(
        protocol_version=draw(st.one_of(st.sampled_from([0, 1, 1, 1, 2, 99]), UINT32)),
        hook_version=draw(TEXT),
        job_id=job,
        rank=rank,
        local_rank=draw(INT32),
        world_size=draw(st.one_of(st.integers(1, 8), INT32)),
        host=host,
        pid=draw(st.one_of(st.integers(PID_MAX_LIMIT + 1, 2**31 - 1), st.integers(-(2**31), 0))),
        interval_ms=draw(st.one_of(st.sampled_from([0, 10, 100, 1000]), UINT32)),
        ray=probe_pb2.RayIdentity(
            job_id=draw(TEXT), node_id=draw(TEXT), actor_id=draw(TEXT), worker_id=draw(TEXT)
        ),
        gpu_uuid=draw(TEXT),
        cuda_device=draw(INT32),
        labels=draw(st.dictionaries(TEXT, TEXT, max_size=70)),
        stack_signal=draw(st.one_of(st.just(0), INT32)),
        stack_file=draw(TEXT),
        thread_id=draw(UINT64),
        thread_native_id=draw(UINT64),
    )


@st.composite
def phases(draw: st.DrawFn) -> probe_pb2.Phase:
    return probe_pb2.Phase(
        name=draw(TEXT), start_mono_ns=draw(INT64), timeout_s=draw(FLOATS), end_mono_ns=draw(INT64)
    )


@st.composite
def syncs(draw: st.DrawFn) -> probe_pb2.SyncStats:
    groups = draw(
        st.lists(
            st.builds(
                probe_pb2.GroupSeq,
                group=TEXT,
                issued=UINT64,
                completed=UINT64,
                oldest_inflight_start_mono_ns=INT64,
                inflight_op=TEXT,
                inflight_seq=UINT64,
            ),
            max_size=8,
        )
        | st.integers(250, 300).map(
            lambda n: [probe_pb2.GroupSeq(group=str(i), issued=1) for i in range(n)]
        )
    )
    samples = draw(
        st.lists(
            st.builds(
                probe_pb2.CollectiveSample,
                group=TEXT,
                seq=UINT64,
                op=TEXT,
                bytes=UINT64,
                start_mono_ns=INT64,
                end_mono_ns=INT64,
                step=INT64,
            ),
            max_size=6,
        )
    )
    return probe_pb2.SyncStats(
        count=draw(UINT64),
        p50_s=draw(FLOATS),
        max_s=draw(FLOATS),
        bytes=draw(UINT64),
        sum_s=draw(FLOATS),
        groups=groups,
        samples=samples,
    )


@st.composite
def reports(draw: st.DrawFn) -> probe_pb2.Report:
    now = draw(NOW_NS)
    n = draw(st.one_of(st.integers(0, 4), st.sampled_from([256, 1025, 5000])))
    skew = draw(st.sampled_from([0, 0, 0, 1, -1]))  # unequal lengths now and then
    report = probe_pb2.Report(
        seq=draw(UINT64),
        mono_ns=draw(st.one_of(st.just(now), INT64)),
        wall_ns=draw(INT64),
        has_step=draw(st.booleans()),
        last_step=draw(INT64),
        last_step_mono_ns=draw(st.one_of(st.just(now - 1000), INT64)),
        total_steps=draw(INT64),
        step_stats=probe_pb2.StepStats(count=draw(UINT64), sum_s=draw(FLOATS), max_s=draw(FLOATS)),
        active_phases=draw(st.lists(phases(), max_size=3) | st.just([probe_pb2.Phase()] * 70)),
        finished_phases=draw(st.lists(phases(), max_size=3)),
        dropped_reports=draw(UINT64),
        recent_steps=list(range(n)),
        recent_step_end_mono_ns=[now] * max(0, n + skew),
        recent_step_s=[draw(FLOATS)] * n,
    )
    if draw(st.booleans()):
        report.gpu_memory.CopyFrom(
            probe_pb2.GpuMemory(
                device_index=draw(INT32),
                allocated_bytes=draw(UINT64),
                has_nvml=draw(st.booleans()),
                device_used_bytes=draw(UINT64),
                device_total_bytes=draw(UINT64),
                process_used_bytes=draw(UINT64),
                device_uuid=draw(TEXT),
            )
        )
    if draw(st.booleans()):
        report.sync.CopyFrom(draw(syncs()))
    return report


def _message(body: str, value: object) -> bytes:
    return probe_pb2.WorkerMessage(**{body: value}).SerializeToString()


#: One stream's worth of input, already serialized: whole messages in any
#: order (a report before the Hello, two Hellos, a result for a command never
#: sent, a Goodbye and more after it) and bytes that are not a message at all.
MESSAGE = st.one_of(
    hellos().map(lambda h: _message("hello", h)),
    reports().map(lambda r: _message("report", r)),
    st.builds(
        probe_pb2.CommandResult,
        command_id=UINT64,
        ok=st.booleans(),
        error=TEXT,
        python_stacks=TEXT,
        method=TEXT,
    ).map(lambda c: _message("command_result", c)),
    TEXT.map(lambda t: _message("goodbye", probe_pb2.Goodbye(reason=t))),
    st.binary(max_size=200),
    st.just(b""),
)
STREAMS = st.one_of(
    st.tuples(hellos().map(lambda h: _message("hello", h)), st.lists(MESSAGE, max_size=5)).map(
        lambda t: [t[0], *t[1]]
    ),
    st.lists(MESSAGE, max_size=6),
)


CONNECT = "/trainprobe.v1.Sidecar/Connect"
#: What a crash, a hang or an unhandled error in the sidecar looks like to a client.
CRASH_CODES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)


def send_stream(channel: grpc.Channel, messages: list[bytes], timeout_s: float = 10.0) -> Any:
    """Send serialized messages on one Connect stream, half-close; its status code."""
    call = channel.stream_stream(
        CONNECT, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    try:
        for _ in call(iter(messages), timeout=timeout_s):
            pass
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK
