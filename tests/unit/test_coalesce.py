"""Folding a worker's consecutive reports on the relaying node (relay/coalesce.py).

The reference is the upstream itself: a real Registry that applies two
reports one after the other (as it did before folding, when both arrived in
one batch) must be left judging exactly as one that applies the folded one.
"""

from __future__ import annotations

import pytest

from tests.core_builders import NS, connected
from trainprobe.proto import probe_pb2
from trainprobe.sidecar.core.limits import MAX_RECENT, MAX_STARTS
from trainprobe.sidecar.core.session import Registry, WorkerState, validate_report
from trainprobe.sidecar.relay.buffer import Folded, Kind, RelayBuffer
from trainprobe.sidecar.relay.coalesce import MAX_FOLDED_BYTES, fold_into
from trainprobe.sidecar.transport.pb import report_from_pb

T0 = 100.0


def _report(k: int, t_s: float, nvml: bool = False, late_s: float = 0.0) -> probe_pb2.Report:
    """The ``k``-th report of a DDP worker: 2 steps, 4 collectives, a phase."""
    ns = int(t_s * NS)
    r = probe_pb2.Report(
        seq=k,
        mono_ns=ns,
        wall_ns=ns + 1_700_000_000 * NS,
        has_step=True,
        last_step=2 * k,
        last_step_mono_ns=ns - 1_000_000,
        total_steps=2 * k,
        step_stats=probe_pb2.StepStats(count=2, sum_s=0.1 + k / 100, max_s=0.06 + k / 100),
        recent_steps=[2 * k - 1, 2 * k],
        recent_step_end_mono_ns=[ns - 50_000_000, ns - 1_000_000],
        recent_step_s=[0.04 + k / 100, 0.06 + k / 100],
        dropped_reports=k // 2,
        active_phases=[probe_pb2.Phase(name=f"eval{k}", start_mono_ns=ns - 5, timeout_s=30.0)],
        finished_phases=[
            probe_pb2.Phase(name=f"ckpt{k}", start_mono_ns=ns - 9, end_mono_ns=ns - 7)
        ],
        gpu_memory=probe_pb2.GpuMemory(
            allocated_bytes=1000 * k, reserved_bytes=2000 * k, device_uuid="GPU-1"
        ),
    )
    if nvml:
        g = r.gpu_memory
        g.has_nvml, g.device_used_bytes, g.device_total_bytes = True, 900 + k, 1000
        g.process_used_bytes = 500 + k
    first = 4 * (k - 1) + 1
    r.sync.CopyFrom(
        probe_pb2.SyncStats(
            count=4,
            p50_s=0.001 * k,
            max_s=0.002 * k,
            bytes=100,
            sum_s=0.005 * k,
            groups=[
                probe_pb2.GroupSeq(
                    group="default",
                    issued=first + 3,
                    completed=first + 2,
                    oldest_inflight_start_mono_ns=ns - 3_000_000,
                    inflight_op="allreduce",
                    inflight_seq=first + 3,
                    started_seqs=range(first, first + 4),
                    started_mono_ns=[
                        ns - (40 - i) * 1_000_000 + int(late_s * NS) for i in range(4)
                    ],
                )
            ],
            samples=[
                probe_pb2.CollectiveSample(
                    group="default", seq=first, op="allreduce", start_mono_ns=ns - 9, end_mono_ns=ns
                )
            ],
        )
    )
    return r


def _folded(a: probe_pb2.Report, b: probe_pb2.Report) -> probe_pb2.Report:
    acc = probe_pb2.Report()
    acc.CopyFrom(a)
    assert fold_into(acc, b)
    return acc


def _judged(w: WorkerState) -> dict[str, object]:
    """Everything in a session that rules, culprit analysis or status read."""
    return {
        "step": (w.has_step, w.last_step, w.last_step_at, w.total_steps),
        "sent": (w.last_sent_at, w.last_report_at, w.ingest_lag_s, w.offset_s),
        "samples": (w.step_samples.kept(), w.step_p99_s),
        "phases": (w.active_phases, w.last_phase_end_at),
        "gpu": (w.gpu, list(w.gpu_ratios)),
        "inflight": w.inflight_since,
        # The latest window's groups; its count and median are compared below.
        "groups": None
        if w.sync_window is None
        else [(g.group, g.issued, g.completed, g.inflight_seq) for g in w.sync_window.groups],
        "sync_max_s": None if w.sync_window is None else w.sync_window.max_s,
        "rate": w.rate_points[-1],
        "arrival": w.arrival.summary(),
    }


def _two_ranks(reports: list[list[probe_pb2.Report]]) -> tuple[dict, dict]:
    """Rank 0 and rank 1 (entering every collective 20 ms late) apply ``reports``
    per batch, each batch at one moment; both ranks' judged state."""
    reg = Registry()
    w0, w1 = connected(reg, 0, T0), connected(reg, 1, T0)
    for i, batch in enumerate(reports):
        now = T0 + 1 + i * 0.2
        for r0, r1 in batch:
            reg.apply(w0, report_from_pb(r0), now)
            reg.apply(w1, report_from_pb(r1), now)
    return _judged(w0), _judged(w1)


def test_a_folded_pair_leaves_the_upstream_judging_as_the_two_reports_did() -> None:
    def pairs(k: int) -> tuple[tuple, tuple]:
        t = T0 + 0.9 + k * 0.1
        a = (_report(k, t, nvml=k == 1), _report(k, t, nvml=k == 1, late_s=0.02))
        b = (_report(k + 1, t + 0.1), _report(k + 1, t + 0.1, late_s=0.02))
        return a, b

    batches = [pairs(k) for k in (1, 3, 5)]
    separate = _two_ranks([[a, b] for a, b in batches])
    folded = _two_ranks([[(_folded(a[0], b[0]), _folded(a[1], b[1]))] for a, b in batches])
    for rank in (0, 1):
        assert folded[rank] == separate[rank], f"rank {rank}"
    # One difference, on the side of seeing more: the sync window the upstream
    # keeps spans both reports (8 collectives), not only the newer one's 4, so a
    # slow collective in the older half is not overwritten before any tick.
    assert separate[1]["arrival"].count > 0 and separate[1]["arrival"].p50_s == pytest.approx(0.02)


def test_a_folded_report_carries_both_in_order_and_passes_validation() -> None:
    a, b = _report(1, T0, nvml=True), _report(2, T0 + 0.1)
    f = _folded(a, b)
    assert list(f.recent_steps) == [1, 2, 3, 4]
    assert [p.name for p in f.finished_phases] == ["ckpt1", "ckpt2"]
    assert [p.name for p in f.active_phases] == ["eval2"]
    assert (f.seq, f.mono_ns, f.total_steps, f.dropped_reports) == (2, b.mono_ns, 4, 1)
    assert f.step_stats.count == 4 and f.step_stats.max_s == b.step_stats.max_s
    assert f.step_stats.sum_s == pytest.approx(a.step_stats.sum_s + b.step_stats.sum_s)
    # The newer allocator figures with the one NVML sample (the older report's).
    assert f.gpu_memory.allocated_bytes == 2000 and f.gpu_memory.device_used_bytes == 901
    s = f.sync
    assert (s.count, s.bytes, s.max_s, s.p50_s) == (8, 200, 0.004, 0.002)
    assert list(s.groups[0].started_seqs) == list(range(1, 9))
    assert s.groups[0].issued == 8 and len(s.samples) == 2
    validate_report(report_from_pb(f))


def _refused(a: probe_pb2.Report, b: probe_pb2.Report) -> None:
    for r in (a, b):  # each valid alone: what is refused is their fold
        validate_report(report_from_pb(r))
    acc = probe_pb2.Report()
    acc.CopyFrom(a)
    assert not fold_into(acc, b)
    assert acc == a  # untouched


def _copy(r: probe_pb2.Report) -> probe_pb2.Report:
    out = probe_pb2.Report()
    out.CopyFrom(r)
    return out


def test_what_would_not_be_equivalent_is_not_folded() -> None:
    a, b = _report(1, T0), _report(2, T0 + 0.1)
    _refused(_report(1, T0, nvml=True), _report(2, T0 + 0.1, nvml=True))  # two NVML samples
    no_sync = _copy(b)
    no_sync.ClearField("sync")
    _refused(a, no_sync)  # the newer one clears the in-flight state
    other = _copy(b)
    other.sync.groups[0].group = "tp"
    _refused(a, other)  # a group the newer one no longer carries
    reset = _copy(b)
    g = reset.sync.groups[0]
    g.issued = g.completed = g.inflight_seq = 1
    g.started_seqs[:], g.started_mono_ns[:] = [1], [5]
    _refused(a, reset)  # the older's issue times past the newer's issued
    _refused(b, a)  # clocks going back
    fewer = _copy(b)
    fewer.has_step, fewer.last_step, fewer.last_step_mono_ns = False, 0, 0
    fewer.total_steps = 1
    _refused(a, fewer)  # step totals going back: the registry keeps the older's
    for r in (_copy(a), _copy(b)):  # an old hook: one calibration sample a report
        for field in ("recent_steps", "recent_step_end_mono_ns", "recent_step_s"):
            r.ClearField(field)
        if r.seq == 1:
            _refused(r, b)
        else:
            _refused(a, r)
    big = _copy(a)
    n = MAX_RECENT - 1
    big.recent_steps[:] = range(n)
    big.recent_step_end_mono_ns[:] = [1] * n
    big.recent_step_s[:] = [0.1] * n
    _refused(big, b)  # past a limit the upstream enforces
    starts = _copy(a)
    g = starts.sync.groups[0]
    g.issued = g.completed = MAX_STARTS
    g.started_seqs[:] = range(1, MAX_STARTS)
    g.started_mono_ns[:] = [1] * (MAX_STARTS - 1)
    _refused(starts, b)
    huge = _copy(a)
    huge.step_stats.count = 1 << 63
    more = _copy(b)
    more.step_stats.count = 1 << 63
    _refused(huge, more)  # a sum past uint64 (it would raise out of the node's loop)


def test_a_report_the_upstream_would_refuse_goes_up_as_it_came() -> None:
    good = _bytes(_report(2, T0 + 0.1))
    empty = probe_pb2.WorkerMessage(report=probe_pb2.Report()).SerializeToString()  # mono_ns 0
    nan = _report(3, T0 + 0.2)
    nan.step_stats.max_s = float("nan")
    for bad in (empty, _bytes(nan)):
        buf = RelayBuffer(10)
        buf.add(1, Kind.REPORT, bad)
        buf.add(1, Kind.REPORT, good)  # not folded into the bad one
        buf.add(1, Kind.REPORT, bad)  # nor the bad one into it
        items = buf.take()[0]
        assert [p if isinstance(p, bytes) else p.reports for _, _, p in items] == [bad, 1, bad]


def _bytes(r: probe_pb2.Report) -> bytes:
    return probe_pb2.WorkerMessage(report=r).SerializeToString()


def test_the_buffer_folds_a_stream_s_reports_until_another_item_comes_between() -> None:
    buf = RelayBuffer(10)
    buf.add(1, Kind.HELLO, b"h1")
    for k in (1, 2):
        buf.add(1, Kind.REPORT, _bytes(_report(k, T0 + k / 10)))
        buf.add(2, Kind.REPORT, _bytes(_report(k, T0 + k / 10)))
    buf.add(1, Kind.MESSAGE, b"result")  # nothing folds across it
    buf.add(1, Kind.REPORT, _bytes(_report(3, T0 + 0.3)))
    items, dropped = buf.take()
    assert [(sid, kind) for sid, kind, _ in items] == [
        (1, Kind.HELLO),
        (1, Kind.REPORT),
        (2, Kind.REPORT),
        (1, Kind.MESSAGE),
        (1, Kind.REPORT),
    ]
    first = items[1][2]
    assert isinstance(first, Folded) and first.reports == 2
    assert list(probe_pb2.WorkerMessage.FromString(first.serialize()).report.recent_steps) == [
        1,
        2,
        3,
        4,
    ]
    # A taken batch is closed: the next report starts a new item.
    buf.add(2, Kind.REPORT, _bytes(_report(3, T0 + 0.3)))
    assert len(buf) == 1 and dropped == 0


def test_a_folded_report_counts_as_every_report_it_carries() -> None:
    # The bound is on messages held, not items: folding must not let an outage
    # buffer hold more reports (memory) than it did without folding.
    buf = RelayBuffer(4)
    buf.add(1, Kind.HELLO, b"h1")
    for k in (1, 2, 3):
        assert not buf.add(1, Kind.REPORT, _bytes(_report(k, T0 + k / 10)))
    assert len(buf) == 2  # Hello + one report carrying three: 4 messages, full
    # Full: the newest report is a new item, and the three older ones go.
    assert buf.add(1, Kind.REPORT, _bytes(_report(4, T0 + 0.4)))
    items, dropped = buf.take()
    assert [kind for _, kind, _ in items] == [Kind.HELLO, Kind.REPORT]
    assert items[1][2].reports == 1 and dropped == 3 and buf.dropped_total == 3
    for k in (5, 6):  # one item of 2
        buf.add(1, Kind.REPORT, _bytes(_report(k, T0 + k / 10)))
    assert not buf.add(1, Kind.MESSAGE, b"result")  # 3 held
    for k in (7, 8):  # a new item (not folded across "result"): 4 held, then full
        buf.add(1, Kind.REPORT, _bytes(_report(k, T0 + k / 10)))
    items, dropped = buf.take()
    assert [kind for _, kind, _ in items] == [Kind.MESSAGE, Kind.REPORT, Kind.REPORT]
    assert dropped == 2  # the oldest report item, both of it


def test_a_full_buffer_never_sheds_the_report_it_just_took() -> None:
    buf = RelayBuffer(4)
    buf.add(1, Kind.HELLO, b"h1")
    buf.add(2, Kind.HELLO, b"h2")
    buf.add(1, Kind.REPORT, _bytes(_report(1, T0)))
    buf.add(2, Kind.REPORT, _bytes(_report(1, T0)))
    assert buf.add(1, Kind.REPORT, _bytes(_report(2, T0 + 0.1)))  # full: r1 of stream 1 goes
    items, dropped = buf.take()
    assert [(sid, kind) for sid, kind, _ in items][2:] == [(2, Kind.REPORT), (1, Kind.REPORT)]
    kept = probe_pb2.WorkerMessage.FromString(items[3][2].serialize()).report
    assert kept.seq == 2 and dropped == 1  # stream 1 keeps its newest report


def test_a_folded_report_stops_growing_at_its_byte_budget() -> None:
    # Each fold costs time in proportion to the newer report only, and a folded
    # report takes no more past MAX_FOLDED_BYTES: a worker cannot make its node slow.
    buf = RelayBuffer(100_000)
    data = []
    for k in range(1, 1001):
        r = _report(k, T0 + k / 10)
        for field in ("sync", "finished_phases"):  # no other limit comes first
            r.ClearField(field)
        data.append(_bytes(r))
    for d in data:
        buf.add(1, Kind.REPORT, d)
    items = buf.take()[0]
    assert sum(p.reports for _, _, p in items) == 1000
    assert all(p.size <= MAX_FOLDED_BYTES for _, _, p in items)
    assert len(items) > 1
    largest = max(map(len, data))
    assert all(p.size > MAX_FOLDED_BYTES - largest for _, _, p in items[:-1])  # each one full
