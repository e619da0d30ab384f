"""The folded histograms (trainprobe.sidecar.otel.metrics.histograms): pure, fake clock, no SDK."""

from __future__ import annotations

import math

import pytest

from trainprobe.sidecar.otel.metrics import histograms
from trainprobe.sidecar.otel.metrics.histograms import FoldedHistogram, HistPoint

BOUNDS = (0.01, 0.1, 1.0)
NAMES = ("trainprobe.job_id", "trainprobe.rank")


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000

    def __call__(self) -> int:
        return self.ns


def make(limit: int = histograms.CARDINALITY_LIMIT) -> tuple[FoldedHistogram, Clock]:
    clock = Clock()
    return FoldedHistogram(BOUNDS, NAMES, limit=limit, clock_ns=clock), clock


def by_rank(points: list[HistPoint]) -> dict[object, HistPoint]:
    return {p.attributes.get("trainprobe.rank", "overflow"): p for p in points}


def test_values_fall_in_bucket_le_their_bound_and_negatives_are_dropped() -> None:
    h, _ = make()
    h.add_reader("r")
    h.record(("j", 0), [0.0, 0.01, 0.010001, 0.1, 5.0, -1.0])
    (p,) = h.collect("r")
    assert p.attributes == {"trainprobe.job_id": "j", "trainprobe.rank": 0}
    # (-inf, 0.01], (0.01, 0.1], (0.1, 1], (1, inf): a value on a bound is in that bucket.
    assert p.bucket_counts == (2, 2, 0, 1)
    assert p.count == 5
    assert p.sum == pytest.approx(5.120001)
    assert (p.min, p.max) == (0.0, 5.0)
    assert p.explicit_bounds == BOUNDS


def test_cumulative_reader_keeps_every_value_and_its_series_start() -> None:
    h, clock = make()
    h.add_reader("r")
    clock.ns = 2_000
    h.record(("j", 0), [0.05])
    clock.ns = 3_000
    (first,) = h.collect("r")
    assert (first.start_time_unix_nano, first.time_unix_nano) == (2_000, 3_000)
    clock.ns = 4_000
    h.record(("j", 0), [0.5, 0.001])
    h.record(("j", 1), [2.0])
    clock.ns = 5_000
    points = by_rank(h.collect("r"))
    p0 = points[0]
    assert (p0.count, p0.bucket_counts, p0.min, p0.max) == (3, (1, 1, 1, 0), 0.001, 0.5)
    assert p0.sum == pytest.approx(0.551)
    assert (p0.start_time_unix_nano, p0.time_unix_nano) == (2_000, 5_000)
    assert points[1].start_time_unix_nano == 4_000
    # Nothing new: a cumulative reader still sees every series.
    assert by_rank(h.collect("r"))[0].count == 3


def test_delta_reader_gets_each_value_once_and_no_point_without_values() -> None:
    h, clock = make()
    clock.ns = 10
    h.add_reader("d", delta=True)
    h.record(("j", 0), [0.05])
    h.record(("j", 1), [0.05])
    clock.ns = 20
    assert {p.count for p in h.collect("d")} == {1}
    h.record(("j", 0), [0.5, 0.5])
    clock.ns = 30
    (p,) = h.collect("d")
    assert p.attributes["trainprobe.rank"] == 0
    assert (p.count, p.min, p.start_time_unix_nano, p.time_unix_nano) == (2, 0.5, 20, 30)
    assert h.collect("d") == []


def test_two_readers_each_see_every_value_whichever_collects_first() -> None:
    h, _ = make()
    h.add_reader("cum")
    h.add_reader("delta", delta=True)
    h.record(("j", 0), [0.05])
    assert h.collect("cum")[0].count == 1
    h.record(("j", 0), [0.5])
    assert h.collect("cum")[0].count == 2
    # The delta reader never collected: both values, each once.
    (p,) = h.collect("delta")
    assert (p.count, p.min, p.max) == (2, 0.05, 0.5)


def test_a_reader_added_later_sees_only_later_values() -> None:
    h, _ = make()
    h.add_reader("a")
    h.record(("j", 0), [0.05])
    h.add_reader("b")
    h.record(("j", 0), [0.5])
    assert h.collect("a")[0].count == 2
    assert h.collect("b")[0].count == 1


def test_attribute_sets_beyond_the_limit_fold_into_the_overflow_set() -> None:
    h, _ = make(limit=3)
    h.add_reader("r")
    for rank in range(5):
        h.record(("j", rank), [0.05 * (rank + 1)])
    points = by_rank(h.collect("r"))
    assert sorted(points, key=str) == [0, 1, 2, "overflow"]
    over = points["overflow"]
    assert over.attributes == {"otel.metric.overflow": True}
    assert over.count == 2 and over.sum == pytest.approx(0.45)
    # A known set keeps its own series; a new one still overflows.
    h.record(("j", 1), [0.05])
    h.record(("j", 9), [0.05])
    points = by_rank(h.collect("r"))
    assert (points[1].count, points["overflow"].count) == (2, 3)


def test_an_uncollected_window_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(histograms, "WINDOW_LIMIT", 4)
    h, _ = make()
    h.add_reader("r")
    for rank in range(10):
        h.record(("j", rank), [0.05])
    assert len(h._window) == 5  # four sets and the overflow set
    points = h.collect("r")
    assert sum(p.count for p in points) == 10


def test_empty_values_make_no_series() -> None:
    h, _ = make()
    h.add_reader("r")
    h.record(("j", 0), [])
    h.record(("j", 1), [-0.5])
    assert h.collect("r") == []
    assert math.isinf(histograms.Row(2, 0).low)
