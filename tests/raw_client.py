"""A worker without the hook, for the tests that must say what a hook never
would (a hostile name, a claim with no ticket, made-up GPU figures): its
messages built by hand and sent on one raw ``Connect`` stream."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import grpc

from trainprobe.proto import probe_pb2

__all__ = ["CONNECT", "connect", "stepping"]

CONNECT = "/trainprobe.v1.Sidecar/Connect"


def stepping(
    hello: probe_pb2.Hello, stop: threading.Event, every_s: float = 0.1, **fields: Any
) -> Iterator[probe_pb2.WorkerMessage]:
    """``hello``, then until ``stop`` is set a report every ``every_s``, report n
    saying that step n just ended; ``fields`` go into every report."""
    yield probe_pb2.WorkerMessage(hello=hello)
    seq = 0
    while not stop.is_set():
        seq += 1
        now = time.monotonic_ns()
        yield probe_pb2.WorkerMessage(
            report=probe_pb2.Report(
                seq=seq,
                mono_ns=now,
                wall_ns=time.time_ns(),
                has_step=True,
                last_step=seq,
                last_step_mono_ns=now,
                total_steps=seq,
                **fields,
            )
        )
        stop.wait(every_s)


def connect(target: str, messages: Iterable[probe_pb2.WorkerMessage]) -> None:
    """Send ``messages`` on one Connect stream and drop the sidecar's commands
    until the stream ends, however it ends."""
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            CONNECT,
            request_serializer=probe_pb2.WorkerMessage.SerializeToString,
            response_deserializer=probe_pb2.Command.FromString,
        )
        with contextlib.suppress(grpc.RpcError):
            for _ in call(iter(messages)):
                pass
