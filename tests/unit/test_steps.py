"""The hook's step ring and the reporter-side window reader."""

from __future__ import annotations

import time

import pytest

from trainprobe.hooks.watch.steps import (
    MAX_RECENT_STEPS,
    RING_SIZE,
    PhaseRecord,
    PhaseTracker,
    StepRing,
    StepWindowReader,
)


def push(ring: StepRing, t_ns: int, step: object = None) -> None:
    n = ring.n
    ring.ends[n % RING_SIZE] = t_ns
    ring.steps[n % RING_SIZE] = n + 1 if step is None else step
    ring.n = n + 1


def test_windows_count_each_step_once_and_skip_the_first() -> None:
    ring = StepRing()
    reader = StepWindowReader(ring)
    assert reader.read([], []).last_step is None
    for i in range(5):
        push(ring, (10 + i) * 10**9)
    w = reader.read([], [])
    assert (w.count, w.sum_s, w.max_s) == (4, 4.0, 1.0)  # the first step measures start-up
    assert w.last_step == 5 and w.last_step_ns == 14 * 10**9 and w.total_steps == 5
    assert w.recent_s == [0.0, 1.0, 1.0, 1.0, 1.0]
    push(ring, 17 * 10**9)
    w = reader.read([], [])
    assert (w.count, w.sum_s) == (1, 3.0)  # across the window boundary
    assert reader.read([], []).count == 0


def test_a_rewind_resends_the_recent_steps_for_a_new_session() -> None:
    """A restarted sidecar gets the step history its auto threshold needs."""
    ring = StepRing()
    reader = StepWindowReader(ring)
    for i in range(300):
        push(ring, (10 + i) * 10**9)
    assert reader.read([], []).count == 299
    assert reader.read([], []).recent_s == []  # nothing new
    reader.rewind()
    w = reader.read([], [])
    assert len(w.recent_s) == MAX_RECENT_STEPS and w.recent_steps[-1] == 300
    assert w.recent_s[0] == 0.0 and w.recent_s[1:] == [1.0] * (MAX_RECENT_STEPS - 1)
    assert w.total_steps == 300 and reader.read([], []).recent_s == []


def test_intervals_overlapping_a_phase_are_not_step_times() -> None:
    ring = StepRing()
    reader = StepWindowReader(ring)
    for t in (1, 2, 3):
        push(ring, t * 10**9)
    reader.read([], [])
    ckpt = PhaseRecord("checkpoint", int(3.5e9), 900.0, int(60e9))
    push(ring, 61 * 10**9)  # interval 3 -> 61 contains the checkpoint
    push(ring, 62 * 10**9)
    w = reader.read([], [ckpt])
    assert (w.count, w.max_s) == (1, 1.0)
    assert w.recent_s == [0.0, 1.0]


def test_an_active_phase_excludes_the_current_interval() -> None:
    ring = StepRing()
    reader = StepWindowReader(ring)
    push(ring, 1 * 10**9)
    active = PhaseRecord("eval", int(1.5e9), 0.0)
    push(ring, 9 * 10**9)
    assert reader.read([active], []).count == 0


def test_ring_overflow_keeps_the_newest_steps() -> None:
    ring = StepRing()
    reader = StepWindowReader(ring)
    for i in range(RING_SIZE * 3):
        push(ring, i * 10**6)
    w = reader.read([], [])
    assert w.total_steps == RING_SIZE * 3 and w.last_step == RING_SIZE * 3
    assert w.count == RING_SIZE - 1 and w.max_s == pytest.approx(0.001)
    assert len(w.recent_steps) == 256 and w.recent_steps[-1] == RING_SIZE * 3


def test_tensor_like_steps_are_never_converted() -> None:
    class FakeCudaTensor:  # stands in for a CUDA tensor: int() on it would sync the device
        device = "cuda:0"

        def __index__(self) -> int:
            raise AssertionError("read a tensor")

    ring = StepRing()
    reader = StepWindowReader(ring)
    push(ring, 10**9, FakeCudaTensor())
    assert reader.read([], []).last_step == 1  # falls back to the count


def test_phase_tracker_is_thread_safe_bookkeeping() -> None:
    tracker = PhaseTracker(max_finished=2)
    a = tracker.enter("a", 5.0)
    b = tracker.enter("b", 0.0)
    time.sleep(0.001)
    tracker.exit(a)
    tracker.exit(a)  # a second exit is ignored
    active, finished = tracker.snapshot()
    assert [p.name for p in active] == ["b"] and [p.name for p in finished] == ["a"]
    assert finished[0].end_ns > finished[0].start_ns
    assert tracker.snapshot()[1] == []
    tracker.exit(b)
    for _ in range(5):
        tracker.exit(tracker.enter("x", 0))
    assert len(tracker.snapshot()[1]) == 2  # bounded
