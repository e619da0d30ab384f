"""StepWindow keeps the p99 of the last N step times without sorting per report."""

from __future__ import annotations

import random

from trainprobe.sidecar.core.thresholds import StepWindow, p99


def test_window_p99_matches_sorting_the_last_n_samples() -> None:
    rng = random.Random(3)
    window = StepWindow(100)
    history: list[float] = []
    for _ in range(1000):
        x = rng.choice([rng.random(), 0.5, 0.25])  # duplicates exercise eviction
        window.append(x)
        history.append(x)
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
        positive = [x for x in batch if x > 0]
        assert fast.extend_positive(batch) == len(positive)
        for x in positive:
            slow.append(x)
        assert list(fast) == list(slow)
        assert fast.sorted() == slow.sorted() == sorted(slow)
        assert fast.p99() == p99(slow) == p99(list(slow))
