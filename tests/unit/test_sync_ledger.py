"""The lock-free collective ledger: numbering, completion, windows, bounds."""

from __future__ import annotations

import threading
import time

from trainprobe.hooks.watch.steps import StepRing
from trainprobe.hooks.watch.sync import (
    END_NS,
    EVENTS,
    MAX_GROUPS,
    MAX_INFLIGHT,
    MAX_SAMPLES,
    MAX_STARTS,
    START_NS,
    GroupLedger,
    SyncLedger,
    sync_stats_pb,
)


def finish(rec: list, after_s: float) -> None:
    rec[END_NS] = rec[START_NS] + int(after_s * 1e9)


def test_collectives_are_numbered_in_issue_order_and_retired_when_done() -> None:
    ring = StepRing()
    ledger = SyncLedger(ring)
    g = ledger.group(None)
    a, b = g.issue("allreduce", 100), g.issue("allreduce", 200)
    ring.n = 3
    c = g.issue("metrics", 4)
    assert [r[0] for r in (a, b, c)] == [1, 2, 3]
    finish(b, 0.5)  # completes out of order: a stays the oldest in flight
    win = ledger.collect()
    assert win is not None
    (counters,) = win.groups
    assert (counters.issued, counters.completed) == (3, 1)
    assert (counters.oldest_seq, counters.oldest_op) == (1, "allreduce")
    assert counters.oldest_start_ns == a[START_NS]
    assert win.durations_s == [0.5] and win.nbytes == 200
    finish(a, 0.25)
    finish(c, 1.0)
    win = ledger.collect()
    assert win is not None
    assert (win.groups[0].issued, win.groups[0].completed, win.groups[0].oldest_seq) == (3, 3, 0)
    assert (win.count, win.p50_s, win.max_s, win.sum_s) == (2, 0.625, 1.0, 1.25)
    assert [(s.op, s.step) for s in win.samples] == [("metrics", 4), ("allreduce", 1)]


def test_each_window_carries_the_issue_times_of_its_new_collectives_bounded() -> None:
    ledger = SyncLedger(StepRing())
    g = ledger.group(None)
    recs = [g.issue("allreduce", 8) for _ in range(3)]
    win = ledger.collect()
    assert win is not None
    assert win.groups[0].started == tuple((r[0], r[START_NS]) for r in recs)
    msg = sync_stats_pb(win).groups[0]
    assert list(msg.started_seqs) == [1, 2, 3]
    assert list(msg.started_mono_ns) == [r[START_NS] for r in recs]
    win = ledger.collect()  # still in flight, but already reported once
    assert win is not None and win.groups[0].started == ()
    many = [g.issue("allreduce", 8) for _ in range(MAX_STARTS + 10)]
    win = ledger.collect()
    assert win is not None
    started = win.groups[0].started
    assert len(started) == MAX_STARTS and started[-1] == (many[-1][0], many[-1][START_NS])


def test_nothing_watched_means_no_window() -> None:
    assert SyncLedger(StepRing()).collect() is None


def test_a_full_deque_drops_the_oldest_and_counts_them_finished() -> None:
    g = GroupLedger("default", StepRing(), max_pending=4)
    recs = [g.issue("allreduce", 1) for _ in range(10)]
    finished: list = []
    counters = g.drain(finished)
    assert (counters.issued, counters.completed, g.dropped) == (10, 6, 6)
    assert counters.oldest_seq == 7
    for r in recs[6:]:
        finish(r, 0.1)
    assert g.drain(finished).completed == 10


def test_collectives_that_never_finish_are_bounded_and_the_oldest_kept() -> None:
    g = GroupLedger("default", StepRing())
    finished: list = []
    first = g.issue("allreduce", 1)
    for _ in range(MAX_INFLIGHT // 2048 + 1):
        for _ in range(2048):
            g.issue("allreduce", 1)
        counters = g.drain(finished)
    assert len(g._inflight) == MAX_INFLIGHT
    assert counters.oldest_seq == 1 and counters.oldest_start_ns == first[START_NS]
    assert counters.issued - counters.completed == MAX_INFLIGHT


def test_an_out_of_order_append_from_another_thread_is_reconciled() -> None:
    g = GroupLedger("default", StepRing())
    first = g.issue("allreduce", 1)
    late = g._pending.pop()  # as if its thread had not appended it yet
    second = g.issue("allreduce", 1)
    finished: list = []
    assert g.drain(finished).completed == 1  # seq 1 presumed lost
    g._pending.append(late)
    counters = g.drain(finished)
    assert (counters.issued, counters.completed, counters.oldest_seq) == (2, 0, 1)
    finish(first, 0.1)
    finish(second, 0.1)
    assert g.drain(finished).completed == 2 and g.dropped == 0


def test_groups_are_bounded_and_the_rest_share_other() -> None:
    ledger = SyncLedger(StepRing())
    for i in range(MAX_GROUPS + 10):
        ledger.group(f"g{i}").issue("x", 0)
    win = ledger.collect()
    assert win is not None and len(win.groups) == MAX_GROUPS
    other = next(g for g in win.groups if g.name == "other")
    assert other.issued == 11


def test_samples_are_the_windows_slowest_and_bounded() -> None:
    ledger = SyncLedger(StepRing())
    g = ledger.group(None)
    for i in range(100):
        finish(g.issue("allreduce", 1), i / 1000)
    win = ledger.collect()
    assert win is not None and win.count == 100
    assert len(win.samples) == MAX_SAMPLES
    assert [s.duration_s for s in win.samples] == [
        i / 1000 for i in range(99, 99 - MAX_SAMPLES, -1)
    ]
    pb = sync_stats_pb(win)
    assert pb.samples[0].end_mono_ns - pb.samples[0].start_mono_ns == 99_000_000
    assert pb.count == 100 and pb.bytes == 100


class StandInEvent:
    """Stands in for torch.cuda.Event: there is no GPU on CI. The real events
    are exercised by tests/gpu/test_gpu_probe.py on the device machine."""

    def __init__(self) -> None:
        self.done = False
        self.at_ms = 0.0

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: StandInEvent) -> float:
        return end.at_ms - self.at_ms


class Pool:
    def __init__(self) -> None:
        self.returned: list[tuple] = []

    def give(self, start: object, end: object) -> None:
        self.returned.append((start, end))


def test_cuda_records_finish_when_their_end_event_has_run_on_the_device() -> None:
    ledger = SyncLedger(StepRing())
    pool = Pool()
    start, end = StandInEvent(), StandInEvent()
    rec = ledger.group(None).issue("allreduce", 8, (start, end, pool))
    assert ledger.collect().groups[0].completed == 0  # type: ignore[union-attr]
    rec[END_NS] = time.monotonic_ns()  # the callback recorded the end event ...
    assert ledger.collect().groups[0].completed == 0  # type: ignore[union-attr]
    start.done, end.done, end.at_ms = True, True, 2.5  # ... and the device reached it
    win = ledger.collect()
    assert win is not None and win.groups[0].completed == 1
    assert win.durations_s == [0.0025]
    assert pool.returned == [(start, end)] and rec[EVENTS] is None


def test_issuing_from_many_threads_loses_nothing() -> None:
    ledger = SyncLedger(StepRing())
    g = ledger.group(None)

    def issue_many() -> None:
        for _ in range(1000):  # 4000 in all: the deque never overflows
            finish(g.issue("allreduce", 1), 0.001)

    threads = [threading.Thread(target=issue_many) for _ in range(4)]
    for t in threads:
        t.start()
    totals = []
    while any(t.is_alive() for t in threads):
        totals.append(ledger.collect())
    for t in threads:
        t.join()
    last = ledger.collect()
    assert last is not None
    assert (last.groups[0].issued, last.groups[0].completed) == (4000, 4000)
    assert sum(w.count for w in [*totals, last] if w is not None) == 4000
    assert g.dropped == 0
