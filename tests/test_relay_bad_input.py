"""Bad relayed input: only the offending worker's virtual stream is refused.

A real upstream sidecar process; the test plays the relaying node on a raw
``Relay`` stream, so that it can send what no node would.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Iterator

import grpc

from tests.support import SidecarProcess, free_port, short_tmpdir, wait_for
from tests.test_bad_input import hello, report
from trainprobe.proto import probe_pb2

RELAY = "/trainprobe.v1.Sidecar/Relay"


def item(sid: int, message: probe_pb2.WorkerMessage | bytes) -> probe_pb2.RelayItem:
    data = message if isinstance(message, bytes) else message.SerializeToString()
    return probe_pb2.RelayItem(stream_id=sid, message=data)


class RawRelay:
    """One Relay stream driven by hand: send batches, collect commands."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target)
        self._out: queue.Queue[probe_pb2.RelayBatch | None] = queue.Queue()
        self.commands: list[probe_pb2.RelayCommand] = []
        self.error: grpc.RpcError | None = None
        call = self.channel.stream_stream(
            RELAY,
            request_serializer=probe_pb2.RelayBatch.SerializeToString,
            response_deserializer=probe_pb2.RelayCommand.FromString,
        )
        self._responses = call(self._batches(), timeout=30)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _batches(self) -> Iterator[probe_pb2.RelayBatch]:
        while (batch := self._out.get()) is not None:
            yield batch

    def _read(self) -> None:
        try:
            for cmd in self._responses:
                self.commands.append(cmd)
        except grpc.RpcError as err:
            self.error = err

    def send(self, *items: probe_pb2.RelayItem) -> None:
        self._out.put(probe_pb2.RelayBatch(items=list(items)))

    def close(self) -> None:
        self._out.put(None)
        self._reader.join(10)
        self.channel.close()

    def rejects(self) -> dict[int, probe_pb2.RelayReject]:
        return {c.stream_id: c.reject for c in self.commands if c.WhichOneof("kind") == "reject"}


def test_bad_relayed_messages_reject_only_their_workers() -> None:
    sc = SidecarProcess(
        short_tmpdir(), "--heartbeat-timeout-s", "3600", "--stall-timeout-s", "3600"
    )
    with sc:
        relay = RawRelay(sc.target)
        try:
            relay.send(
                item(1, hello(rank=0, job="rbad")),
                item(1, report()),
                item(2, hello(rank=1, job="rbad")),
                item(2, b"\xff\xff\xff\xff"),  # not a WorkerMessage at all
                item(3, hello(rank=2, job="rbad")),
                item(3, report(last_step=-4)),  # parses, fails validation
                item(4, report()),  # no Hello first
                item(5, hello(rank=3, job="rbad", protocol_version=99)),
            )
            rejects = wait_for(lambda: len(relay.rejects()) == 4 and relay.rejects(), 10)
            assert {sid: r.code for sid, r in rejects.items()} == {
                2: "INVALID_ARGUMENT",
                3: "INVALID_ARGUMENT",
                4: "FAILED_PRECONDITION",
                5: "FAILED_PRECONDITION",
            }
            assert "malformed WorkerMessage" in rejects[2].details
            assert "bad report" in rejects[3].details
            assert "must be a Hello" in rejects[4].details
            # Items for a refused stream are ignored; the good worker goes on.
            relay.send(item(2, report()), item(1, report(seq=2, last_step=5, total_steps=5)))
            status = wait_for(
                lambda: [w for w in sc.status("rbad").workers if w.step == 5], 10, what="report"
            )
            assert [(w.rank, w.state) for w in status] == [(0, "connected")]
            states = {w.rank: w.state for w in sc.status("rbad").workers}
            assert states == {0: "connected", 1: "rejected", 2: "rejected"}
            assert relay.error is None  # the relay stream itself was never refused
            log = sc.log_text()
            assert log.count("rejected INVALID_ARGUMENT from relay") == 2
            assert "stream 4: the first message must be a Hello" in log
        finally:
            relay.close()
        # The relay ended: its live worker is not dead, its fate is unknown.
        wait_for(
            lambda: {w.rank: w.state for w in sc.status("rbad").workers}[0] == "relay_lost", 10
        )
        assert not sc.incidents()


def test_malformed_batch_ends_the_relay_stream() -> None:
    sc = SidecarProcess(short_tmpdir())
    with sc, grpc.insecure_channel(sc.target) as ch:
        call = ch.stream_stream(RELAY, request_serializer=lambda b: b)
        try:
            list(call(iter([b"\xff\xff\xff"]), timeout=10))
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "malformed RelayBatch" in err.details()
        else:
            raise AssertionError("a malformed batch was accepted")


def test_held_words_out_of_bounds_end_the_relay_stream() -> None:
    sc = SidecarProcess(short_tmpdir())
    with sc:
        relay = RawRelay(sc.target)
        try:
            relay.send(item(1, hello(0, "rheld")))
            word = probe_pb2.HeldWorker(stream_id=1, how=probe_pb2.HELD_STOPPED, age_ms=10**9)
            relay._out.put(probe_pb2.RelayBatch(held=[word]))
            wait_for(lambda: relay.error is not None, 10, what="the refusal")
            assert relay.error.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[union-attr]
            assert "bad RelayBatch.held: held[0].age_ms" in relay.error.details()  # type: ignore[union-attr]
        finally:
            relay.close()


def test_a_node_refused_by_the_upstream_says_why_and_backs_off() -> None:
    port = free_port()
    upstream_flags = ("--listen", f"tcp://127.0.0.1:{port}", "--token", "s3cret")
    with SidecarProcess(short_tmpdir(), *upstream_flags) as upstream:
        node_flags = ("--relay-to", f"tcp://127.0.0.1:{port}", "--token", "wrong", "--insecure")
        with SidecarProcess(short_tmpdir(), *node_flags) as node:
            wait_for(lambda: "is down" in node.log_text(), 30, what="the refusal logged")
            time.sleep(2.0)
            log = node.log_text()
            assert "is down (UNAUTHENTICATED: missing or wrong bearer token)" in log, log
            assert log.count("is down") == 1, log
            # A refused stream never counts as a link (which would reset the backoff).
            assert not re.search(rf": relaying to tcp://127\.0\.0\.1:{port}$", log, re.M), log
            # A refusal backs off to the cap (2.5-5 s with jitter), not to 0.1 s.
            assert upstream.log_text().count("rejected UNAUTHENTICATED") <= 2
