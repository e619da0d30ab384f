"""Bad input: each gets a clear gRPC status and one log line, and touches nobody else."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator

import grpc
import pytest

from tests.support import SidecarProcess, short_tmpdir, wait_for
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2, probe_pb2_grpc

CONNECT = "/trainprobe.v1.Sidecar/Connect"


def hello(rank: int = 0, job: str = "bad", **kw: object) -> probe_pb2.WorkerMessage:
    fields = dict(
        protocol_version=PROTOCOL_VERSION,
        hook_version="test",
        job_id=job,
        rank=rank,
        local_rank=rank,
        world_size=4,
        host="elsewhere",
        pid=os.getpid(),
        interval_ms=100,
    )
    fields.update(kw)
    return probe_pb2.WorkerMessage(hello=probe_pb2.Hello(**fields))


def report(**kw: object) -> probe_pb2.WorkerMessage:
    now = time.monotonic_ns()
    fields = dict(
        seq=1,
        mono_ns=now,
        wall_ns=time.time_ns(),
        has_step=True,
        last_step=3,
        last_step_mono_ns=now - 1000,
        total_steps=3,
    )
    fields.update(kw)
    return probe_pb2.WorkerMessage(report=probe_pb2.Report(**fields))


def run_stream(target: str, messages: list, raw: bool = False) -> grpc.RpcError | None:
    """Send ``messages`` on one Connect stream; return the error status, if any."""
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            CONNECT,
            request_serializer=(lambda b: b) if raw else probe_pb2.WorkerMessage.SerializeToString,
            response_deserializer=probe_pb2.Command.FromString,
        )

        def gen() -> Iterator[object]:
            yield from messages
            time.sleep(0.5)  # keep the stream open long enough to be judged

        try:
            for _ in call(gen(), timeout=10):
                pass
        except grpc.RpcError as err:
            return err
    return None


@pytest.fixture(scope="module")
def sc() -> Iterator[SidecarProcess]:
    proc = SidecarProcess(
        short_tmpdir(), "--heartbeat-timeout-s", "3600", "--stall-timeout-s", "3600"
    )
    with proc:
        yield proc


@pytest.fixture(scope="module")
def healthy(sc: SidecarProcess) -> Iterator[None]:
    """A well-behaved worker that must stay untouched by everyone else's garbage."""
    with grpc.insecure_channel(sc.target) as channel:
        stub = probe_pb2_grpc.SidecarStub(channel)
        stop = False

        def gen() -> Iterator[probe_pb2.WorkerMessage]:
            yield hello(rank=0, job="good")
            step = 0
            while not stop:
                step += 1
                yield report(last_step=step, total_steps=step, seq=step)
                time.sleep(0.1)

        responses = stub.Connect(gen())
        wait_for(lambda: sc.status("good").workers, 10, what="healthy worker")
        yield
        stop = True
        responses.cancel()


CASES = [
    (
        "garbage bytes",
        [b"\xff\xff\xff\xff\x0f"],
        True,
        grpc.StatusCode.INVALID_ARGUMENT,
        "malformed",
    ),
    ("report first", [report()], False, grpc.StatusCode.FAILED_PRECONDITION, "must be a Hello"),
    (
        "future protocol",
        [hello(protocol_version=99)],
        False,
        grpc.StatusCode.FAILED_PRECONDITION,
        "protocol_version=99",
    ),
    (
        "negative step",
        [hello(rank=1), report(last_step=-4)],
        False,
        grpc.StatusCode.INVALID_ARGUMENT,
        "last_step=-4",
    ),
    (
        "nan time",
        [hello(rank=1), report(step_stats=probe_pb2.StepStats(count=1, sum_s=math.nan))],
        False,
        grpc.StatusCode.INVALID_ARGUMENT,
        "sum_s=nan",
    ),
    ("rank out of range", [hello(rank=9)], False, grpc.StatusCode.INVALID_ARGUMENT, "rank=9"),
    (
        "second hello",
        [hello(rank=2), hello(rank=3)],
        False,
        grpc.StatusCode.FAILED_PRECONDITION,
        "second Hello",
    ),
    (
        "duplicate rank",
        [hello(rank=0, job="good", pid=1)],
        False,
        grpc.StatusCode.ALREADY_EXISTS,
        "already reported",
    ),
]


@pytest.mark.parametrize(
    ("name", "messages", "raw", "code", "detail"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input_gets_a_clear_status(
    sc: SidecarProcess,
    healthy: None,
    name: str,
    messages: list,
    raw: bool,
    code: grpc.StatusCode,
    detail: str,
) -> None:
    before = sc.log_text().count("rejected ")
    err = run_stream(sc.target, messages, raw=raw)
    assert err is not None, f"{name} was accepted"
    assert err.code() == code, err.details()
    assert detail in err.details()
    wait_for(lambda: sc.log_text().count("rejected ") == before + 1, 5, what="one log line")
    assert sc.proc.poll() is None
    good = sc.status("good").workers
    assert len(good) == 1 and good[0].state == "connected" and good[0].verdict == "OK"


def test_oversized_message_is_refused(sc: SidecarProcess, healthy: None) -> None:
    big = hello(rank=3, labels={"blob": "x" * (5 * 1024 * 1024)})
    err = run_stream(sc.target, [big])
    assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert sc.proc.poll() is None
    assert sc.status("good").workers[0].state == "connected"


def test_an_older_hook_is_accepted(sc: SidecarProcess, healthy: None) -> None:
    """Version-1 hooks that predate optional fields (interval_ms, ray, gpu) still work."""
    minimal = probe_pb2.WorkerMessage(
        hello=probe_pb2.Hello(
            protocol_version=1, job_id="old", rank=0, world_size=1, pid=os.getpid()
        )
    )
    assert run_stream(sc.target, [minimal, report()]) is None
    row = sc.status("old").workers[0]
    assert row.step == 3 and row.state == "vanished"
