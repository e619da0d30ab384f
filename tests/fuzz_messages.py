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
import random
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
    # Long ones are built, not drawn character by character (10x faster).
    st.tuples(st.text(min_size=1, max_size=4), st.integers(60, 1300)).map(lambda t: t[0] * t[1]),
)
IDS = st.one_of(st.sampled_from(["j0", "j1", "job", ""]), TEXT)
NOW_NS = st.integers(1, 2**62)


def mostly(valid: st.SearchStrategy, wild: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` three times in four: enough sessions get past the Hello to fuzz reports."""
    return st.sampled_from((0, 1, 2, 3)).flatmap(lambda i: wild if i == 3 else valid)


class Fields:
    """Draws a message's fields: all plausible, or (one message in four) each
    field plausible or wild, so both the checks and what lies past them are hit."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.wild = draw(st.sampled_from((False, False, False, True)))

    def __call__(self, valid: st.SearchStrategy, wild: st.SearchStrategy) -> Any:
        return self.draw(st.one_of(valid, wild) if self.wild else valid)


SHORT = st.text(max_size=12)


@st.composite
def hellos(draw: st.DrawFn) -> probe_pb2.Hello:
    f = Fields(draw)
    world = f(st.integers(1, 8), INT32)
    if draw(st.integers(0, 19)) == 0:  # the real worker's own job and rank: refused
        job, rank = VICTIM_JOB, 0
    else:
        job = f(SHORT.map(lambda t: "f-" + t), IDS.filter(lambda j: j != VICTIM_JOB))
        rank = f(st.integers(0, max(0, world - 1)), INT32)
    return probe_pb2.Hello(
        protocol_version=f(st.just(1), st.one_of(st.sampled_from([0, 2, 99]), UINT32)),
        hook_version=f(SHORT, TEXT),
        job_id=job,
        rank=rank,
        local_rank=f(st.integers(0, 8), INT32),
        world_size=world,
        host=draw(st.one_of(st.just(socket.gethostname()), SHORT))
        if not f.wild
        else f(SHORT, TEXT),
        # Never a pid that can exist: see the module docstring.
        pid=f(st.integers(PID_MAX_LIMIT + 1, 2**31 - 1), st.integers(-(2**31), 0)),
        interval_ms=f(st.sampled_from([0, 10, 100, 1000]), UINT32),
        ray=probe_pb2.RayIdentity(
            job_id=f(SHORT, TEXT),
            node_id=f(SHORT, TEXT),
            actor_id=f(SHORT, TEXT),
            worker_id=f(SHORT, TEXT),
        ),
        gpu_uuid=f(SHORT, TEXT),
        cuda_device=f(st.integers(-1, 8), INT32),
        labels=f(
            st.dictionaries(st.text(min_size=1, max_size=8), SHORT, max_size=4),
            st.dictionaries(TEXT, TEXT, max_size=70),
        ),
        stack_signal=f(st.just(0), INT32),
        stack_file=f(st.just(""), TEXT),
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
            max_size=3,
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
            max_size=3,
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
    f = Fields(draw)
    now = draw(NOW_NS)
    step = draw(st.integers(0, 10**6))
    n = f(st.integers(0, 4), st.sampled_from([256, 1025, 5000]))
    skew = f(st.just(0), st.sampled_from([1, -1]))  # unequal lengths
    durations = f(st.floats(0, 10), FLOATS)
    report = probe_pb2.Report(
        seq=draw(UINT64),
        mono_ns=f(st.just(now), INT64),
        wall_ns=draw(INT64),
        has_step=f(st.just(True), st.booleans()),
        last_step=f(st.just(step), INT64),
        last_step_mono_ns=f(st.just(now - 1000), INT64),
        total_steps=f(st.just(step), INT64),
        step_stats=probe_pb2.StepStats(
            count=f(st.integers(0, 4), UINT64),
            sum_s=f(st.floats(0, 10), FLOATS),
            max_s=f(st.floats(0, 10), FLOATS),
        ),
        active_phases=f(st.lists(phases(), max_size=2), st.just([probe_pb2.Phase()] * 70)),
        finished_phases=f(st.just([]), st.lists(phases(), max_size=3)),
        dropped_reports=draw(UINT64),
        recent_steps=list(range(n)),
        recent_step_end_mono_ns=[now] * max(0, n + skew),
        recent_step_s=[durations] * n,
    )
    if draw(st.booleans()):
        report.gpu_memory.CopyFrom(
            probe_pb2.GpuMemory(
                device_index=f(st.integers(0, 8), INT32),
                allocated_bytes=draw(UINT64),
                has_nvml=draw(st.booleans()),
                device_used_bytes=f(st.just(1), UINT64),
                device_total_bytes=f(st.just(2), UINT64),
                process_used_bytes=f(st.just(1), UINT64),
                device_uuid=f(SHORT, TEXT),
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
_REPORT = reports().map(lambda r: _message("report", r))
_SESSION = st.tuples(
    hellos().map(lambda h: _message("hello", h)),
    st.lists(mostly(_REPORT, MESSAGE), max_size=5),
).map(lambda t: [t[0], *t[1]])
#: Mostly a Hello then reports (what reaches the rules), else anything in any order.
STREAMS = mostly(_SESSION, st.lists(MESSAGE, max_size=6))
#: Seeds for :func:`mutants`.
SEEDS = st.integers(0, 2**32 - 1)


def mutants(stream: list[bytes], seed: int, count: int) -> list[list[bytes]]:
    """``count`` variants of a drawn stream, made cheaply from ``seed``.

    Hypothesis spends ~10 ms drawing a stream; a variant costs microseconds.
    Each one flips bytes in, cuts, repeats or reorders the drawn messages:
    the malformed and out-of-order input a broken or hostile client sends.
    """
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        msgs = list(stream) or [b""]
        i = rng.randrange(len(msgs))
        how = rng.randrange(5)
        if how == 0 and msgs[i]:  # flip a few bytes
            b = bytearray(msgs[i])
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            msgs[i] = bytes(b)
        elif how == 1:  # cut short
            msgs[i] = msgs[i][: rng.randrange(len(msgs[i]) + 1)]
        elif how == 2:  # the same message again
            msgs.insert(i, msgs[i])
        elif how == 3:  # out of order
            rng.shuffle(msgs)
        else:  # two messages spliced into one
            j = rng.randrange(len(msgs))
            msgs[i] = msgs[i][: len(msgs[i]) // 2] + msgs[j][len(msgs[j]) // 2 :]
        out.append(msgs)
    return out


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
