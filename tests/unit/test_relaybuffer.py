"""The relaying node's bounded buffer (pure logic)."""

from __future__ import annotations

import pytest

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.relay.buffer import Kind, RelayBuffer, kind_of


def test_kind_of_reads_the_first_tag_of_real_messages() -> None:
    def wm(**kw: object) -> bytes:
        return probe_pb2.WorkerMessage(**kw).SerializeToString()

    assert kind_of(wm(hello=probe_pb2.Hello(rank=1))) is Kind.HELLO
    assert kind_of(wm(report=probe_pb2.Report(seq=1))) is Kind.REPORT
    assert kind_of(wm(report=probe_pb2.Report())) is Kind.REPORT  # empty body, tag still there
    assert kind_of(wm(goodbye=probe_pb2.Goodbye(reason="x"))) is Kind.MESSAGE
    assert kind_of(b"") is Kind.MESSAGE


def test_take_returns_everything_in_order_and_empties() -> None:
    buf = RelayBuffer(10)
    buf.add(1, Kind.HELLO, b"h1")
    buf.add(1, Kind.REPORT, b"r1")
    buf.add(2, Kind.ENDED, True)
    assert buf.take() == (
        [(1, Kind.HELLO, b"h1"), (1, Kind.REPORT, b"r1"), (2, Kind.ENDED, True)],
        0,
    )
    assert buf.take() == ([], 0)


def test_full_buffer_drops_the_oldest_report_not_control_items() -> None:
    buf = RelayBuffer(3)
    assert not buf.add(1, Kind.HELLO, b"h")
    assert not buf.add(1, Kind.REPORT, b"r1")
    assert not buf.add(1, Kind.REPORT, b"r2")
    assert buf.add(1, Kind.MESSAGE, b"bye")  # r1 goes, the Hello stays
    assert buf.add(1, Kind.REPORT, b"r3")  # r2 goes
    items, dropped = buf.take()
    assert [p for _, _, p in items] == [b"h", b"bye", b"r3"]
    assert dropped == 2 and buf.dropped_total == 2
    assert buf.take()[1] == 0  # the count is per batch; the total stays
    assert buf.dropped_total == 2


def test_without_reports_the_oldest_item_goes() -> None:
    buf = RelayBuffer(2)
    buf.add(1, Kind.HELLO, b"h1")
    buf.add(2, Kind.HELLO, b"h2")
    buf.add(3, Kind.HELLO, b"h3")
    assert [s for s, _, _ in buf.take()[0]] == [2, 3]


def test_resume_puts_live_hellos_first_and_drops_stale_ones() -> None:
    buf = RelayBuffer(10)
    buf.add(1, Kind.HELLO, b"h1")
    buf.add(1, Kind.REPORT, b"r1")
    buf.add(2, Kind.HELLO, b"h2")  # stream 2 ended since: not among the live
    buf.add(2, Kind.ENDED, False)
    buf.resume([(1, b"h1"), (7, b"h7")])
    assert buf.take()[0] == [
        (1, Kind.HELLO, b"h1"),
        (7, Kind.HELLO, b"h7"),
        (1, Kind.REPORT, b"r1"),
        (2, Kind.ENDED, False),
    ]


def test_resume_keeps_the_bound() -> None:
    buf = RelayBuffer(3)
    for i in range(3):
        buf.add(1, Kind.REPORT, b"r%d" % i)  # unparsable: kept apart, as sent
    buf.resume([(1, b"h1"), (2, b"h2")])
    items, dropped = buf.take()
    assert [p for _, _, p in items] == [b"h1", b"h2", b"r2"] and dropped == 2


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RelayBuffer(0)
