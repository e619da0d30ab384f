"""StepWindow keeps the p99 of the last N step times without sorting per report."""

from __future__ import annotations

import math
import random

import pytest

from trainprobe.sidecar.core.thresholds import StepWindow, p99, stored_step_time

f32 = stored_step_time  # ``x`` as the window keeps it


def test_window_p99_matches_sorting_the_last_n_samples() -> None:
    rng = random.Random(3)
    window = StepWindow(100)
    history: list[float] = []
    for _ in range(1000):
        x = rng.choice([rng.random(), 0.5, 0.25])  # duplicates exercise eviction
        window.append(x)
        history.append(f32(x))
        assert len(window) == min(len(history), 100)
        assert list(window) == history[-100:]
        assert p99(window) == p99(history[-100:])


def test_empty_window_has_no_p99() -> None:
    assert p99(StepWindow(10)) is None


def test_extend_positive_is_append_of_each_positive_sample() -> None:
    """The inlined report-path loop against appending one by one."""
    rng = random.Random(5)
    fast, slow = StepWindow(50), StepWindow(50)
    for _ in range(300):
        batch = [rng.choice([0.0, rng.random(), 0.5, 0.25]) for _ in range(rng.randrange(0, 5))]
        positive = [f32(x) for x in batch if x > 0]
        assert fast.extend_positive(batch) == len(positive)
        for x in positive:
            slow.append(x)
        assert list(fast) == list(slow)
        assert fast.sorted() == slow.sorted() == sorted(slow)
        assert fast.p99() == p99(slow) == p99(list(slow))


def test_window_p99_holds_when_its_largest_leave_first() -> None:
    """Falling step times (a warm-up ending) evict one of the largest samples at
    every append: they are rebuilt, and the p99 is still that of the last N."""
    for seq in (
        [10.0 - i * 0.001 for i in range(3000)],
        [float(1 + (i % 7)) for i in range(3000)],  # ties
        [random.Random(i).random() for i in range(3000)],
    ):
        window, history = StepWindow(1000), []
        for i in range(0, len(seq), 37):
            window.extend_positive(seq[i : i + 37])
            history.extend(f32(x) for x in seq[i : i + 37])
            assert window.p99() == p99(history[-1000:])
            assert len(window) == min(len(history), 1000)
            assert list(window) == history[-1000:]


def test_a_full_window_holds_its_times_in_2_kb() -> None:
    window = StepWindow(1000)
    assert window._fifo is None  # nothing allocated before the first sample
    window.extend_positive([0.05] * 5000)
    assert window._fifo is not None and window._fifo.itemsize * len(window._fifo) == 2000
    assert len(window._top) <= 22


@pytest.mark.parametrize("x", [1e-6, 3.3e-5, 0.001, 0.0123, 0.25, 1.0, 7.77, 600.0, 86400.0, 9e5])
def test_a_kept_time_is_within_a_fiftieth_of_a_percent(x: float) -> None:
    assert math.isclose(stored_step_time(x), x, rel_tol=2.2e-4)


def test_times_out_of_range_are_clamped_not_lost() -> None:
    window = StepWindow(10)
    window.extend_positive([1e-9, 5e7, math.inf])
    assert len(window) == 3
    assert min(window) == pytest.approx(1e-6, rel=1e-3)
    assert window.p99() == pytest.approx(1e6, rel=1e-3)
