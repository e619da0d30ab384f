"""StepWindow keeps the exact p99 of about the last N step times in a few hundred bytes."""

from __future__ import annotations

import math
import random
import sys

import pytest

from trainprobe.sidecar.core.session.thresholds import StepWindow, p99, stored_step_time

f32 = stored_step_time  # ``x`` as the window keeps it


def _check(window: StepWindow, history: list[float]) -> None:
    """The window is the last len(window) times, at least maxlen once that many came."""
    n = len(window)
    assert n <= len(history)
    assert n >= min(len(history), window.maxlen)
    assert n < window.maxlen + 2 * max(1, window.maxlen // 10)
    assert window.p99() == p99(history[-n:] if n else [])


def test_window_p99_matches_sorting_the_last_n_samples() -> None:
    rng = random.Random(3)
    window = StepWindow(100)
    history: list[float] = []
    for _ in range(1000):
        x = rng.choice([rng.random(), 0.5, 0.25])  # duplicates exercise eviction
        window.append(x)
        history.append(f32(x))
        _check(window, history)


def test_empty_window_has_no_p99() -> None:
    assert StepWindow(10).p99() is None
    assert len(StepWindow(10)) == 0


def test_extend_positive_is_append_of_each_positive_sample() -> None:
    """The inlined report-path loop against appending one by one."""
    rng = random.Random(5)
    fast, slow = StepWindow(50), StepWindow(50)
    history: list[float] = []
    for _ in range(300):
        batch = [rng.choice([0.0, rng.random(), 0.5, 0.25]) for _ in range(rng.randrange(0, 5))]
        positive = [f32(x) for x in batch if x > 0]
        assert fast.extend_positive(batch) == len(positive)
        for x in positive:
            slow.append(x)
        history.extend(positive)
        assert len(fast) == len(slow)
        assert fast.p99() == slow.p99()
        _check(fast, history)


@pytest.mark.parametrize("maxlen", [1, 7, 10, 50, 100, 999, 1000, 1001])
def test_window_p99_holds_when_its_largest_leave_first(maxlen: int) -> None:
    """Falling step times (a warm-up ending) push the largest out first; ties and
    noise too: the p99 is always that of the window's exact last times."""
    for seq in (
        [10.0 - i * 0.001 for i in range(3000)],
        [float(1 + (i % 7)) for i in range(3000)],  # ties
        [random.Random(i).random() for i in range(3000)],
        [100.0 if i % 97 == 0 else 0.1 for i in range(3000)],  # rare slow steps
    ):
        window, history = StepWindow(maxlen), []
        for i in range(0, len(seq), 37):
            window.extend_positive(seq[i : i + 37])
            history.extend(f32(x) for x in seq[i : i + 37])
            _check(window, history)


def test_a_window_of_1000_holds_its_times_in_a_few_hundred_bytes() -> None:
    window = StepWindow(1000)
    window.extend_positive([0.05 + i * 1e-5 for i in range(5000)])
    kept = sum(
        sys.getsizeof(a) for a in (window._blocks, window._cur, window._done) if a is not None
    )
    assert kept < 600, kept  # the whole window as 16-bit codes was 2,000 bytes of data
    assert 1000 <= len(window) < 1100


def test_one_slow_step_in_a_thousand_sets_the_p99_until_it_leaves() -> None:
    """What the stall threshold sees: eleven slow steps among 1,000 are its p99,
    ten are not, and they stop counting once they leave the window."""
    window = StepWindow(1000)
    window.extend_positive([0.1] * 1000)
    window.extend_positive([2.0] * 11)
    assert window.p99() == pytest.approx(2.0, rel=1e-3)
    window.extend_positive([0.1] * 1200)
    assert window.p99() == pytest.approx(0.1, rel=1e-3)


@pytest.mark.parametrize("x", [1e-6, 3.3e-5, 0.001, 0.0123, 0.25, 1.0, 7.77, 600.0, 86400.0, 9e5])
def test_a_kept_time_is_within_a_fiftieth_of_a_percent(x: float) -> None:
    assert math.isclose(stored_step_time(x), x, rel_tol=2.2e-4)


def test_times_out_of_range_are_clamped_not_lost() -> None:
    window = StepWindow(10)
    window.extend_positive([1e-9, 5e7, math.inf])
    assert len(window) == 3
    assert window.p99() == pytest.approx(1e6, rel=1e-3)
    window = StepWindow(10)
    window.extend_positive([1e-9])
    assert window.p99() == pytest.approx(1e-6, rel=1e-3)
