"""What a relay node reads from its workers and writes upstream.

Plain helpers around the relay protocol messages, kept apart from the
node's asyncio plumbing in :mod:`trainprobe.sidecar.relay.node`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.relay.buffer import Folded, Item, Kind


class Rejected(Exception):
    """The upstream refused a worker stream; end it with this status."""

    def __init__(self, reject: probe_pb2.RelayReject) -> None:
        super().__init__(reject.details)
        self.code = getattr(grpc.StatusCode, reject.code, grpc.StatusCode.UNKNOWN)
        self.details = reject.details


@dataclass
class WorkerStream:
    """One worker's Connect stream on this node."""

    sid: int
    hello: bytes
    #: Commands for the worker, and possibly a RelayReject that ends the stream.
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)


def hello_pid_and_ticket(data: bytes) -> tuple[int, bytes, int]:
    """The pid, identity ticket and report interval (ms) a worker's first message
    carries ((0, b"", 0) if it is no Hello, which the upstream rejects)."""
    try:
        msg = probe_pb2.WorkerMessage.FromString(data)
    except Exception:
        return 0, b"", 0
    if msg.WhichOneof("body") != "hello":
        return 0, b"", 0
    return msg.hello.pid, msg.hello.identity_ticket, msg.hello.interval_ms or 1000


def item_pb(item: Item) -> probe_pb2.RelayItem:
    """One buffered item as the RelayItem the upstream reads."""
    sid, kind, payload = item
    if kind is Kind.ENDED:
        return probe_pb2.RelayItem(stream_id=sid, ended=probe_pb2.StreamEnded(pid_alive=payload))
    if kind is Kind.KILL_RESULT:
        return probe_pb2.RelayItem(stream_id=sid, kill_result=payload)
    if isinstance(payload, Folded):
        payload = payload.serialize()
    return probe_pb2.RelayItem(stream_id=sid, message=payload)
