"""Step and phase bookkeeping, split between two threads without a lock.

The training thread only stores into a fixed ring (:class:`StepRing`) and bumps
a counter; under the GIL each store is atomic, and the counter is written last,
so every slot below it is complete. The reporter thread turns the ring into
report windows with :class:`StepWindowReader`. Phases are rare, so
:class:`PhaseTracker` may take a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

RING_SIZE = 1024
RING_MASK = RING_SIZE - 1
#: Most steps a report carries individually (the window's newest).
MAX_RECENT_STEPS = 256


class StepRing:
    """Step end times and numbers; written only by the training thread."""

    __slots__ = ("ends", "n", "steps")

    def __init__(self) -> None:
        self.ends: list[int] = [0] * RING_SIZE
        self.steps: list[object] = [0] * RING_SIZE
        self.n = 0


@dataclass(frozen=True)
class PhaseRecord:
    """A declared phase. ``end_ns`` is 0 while it is active."""

    name: str
    start_ns: int
    timeout_s: float
    end_ns: int = 0


class PhaseTracker:
    """Active and recently finished phases; safe from any thread."""

    def __init__(self, max_finished: int = 64) -> None:
        self._lock = threading.Lock()
        self._active: dict[int, PhaseRecord] = {}
        self._finished: list[PhaseRecord] = []
        self._max_finished = max_finished
        self._next = 0

    def enter(self, name: str, timeout_s: float) -> int:
        with self._lock:
            self._next += 1
            self._active[self._next] = PhaseRecord(name, time.monotonic_ns(), timeout_s)
            return self._next

    def exit(self, token: int) -> None:
        with self._lock:
            rec = self._active.pop(token, None)
            if rec is None:
                return
            self._finished.append(
                PhaseRecord(rec.name, rec.start_ns, rec.timeout_s, time.monotonic_ns())
            )
            if len(self._finished) > self._max_finished:
                del self._finished[0]

    def snapshot(self) -> tuple[list[PhaseRecord], list[PhaseRecord]]:
        """Return (active, finished since the last snapshot)."""
        with self._lock:
            finished, self._finished = self._finished, []
            return list(self._active.values()), finished


@dataclass
class StepWindow:
    """Steps completed since the previous window."""

    count: int = 0
    sum_s: float = 0.0
    max_s: float = 0.0
    total_steps: int = 0
    last_step: int | None = None
    last_step_ns: int = 0
    recent_steps: list[int] = field(default_factory=list)
    recent_ends_ns: list[int] = field(default_factory=list)
    recent_s: list[float] = field(default_factory=list)


_MAX_STEP = 2**63 - 1


def _as_int(value: object, fallback: int) -> int:
    """The step as a wire-safe int, else ``fallback`` (the call count).

    Only real integers are read: int() on a CUDA tensor would sync the device.
    Negative or out-of-range steps would be rejected by the sidecar, so they
    fall back too.
    """
    if type(value) is not int:
        index = getattr(value, "__index__", None)
        if index is None or hasattr(value, "device"):
            return fallback
        try:
            value = int(index())
        except Exception:
            return fallback
    return value if 0 <= value <= _MAX_STEP else fallback


def _overlaps(start_ns: int, end_ns: int, phases: Iterable[PhaseRecord]) -> bool:
    return any(p.start_ns < end_ns and (p.end_ns == 0 or p.end_ns > start_ns) for p in phases)


class StepWindowReader:
    """Reporter-side cursor over a :class:`StepRing`.

    Step intervals that overlap a declared phase are left out of the
    statistics (a checkpoint is not a slow step), and so is the first step,
    which measures start-up rather than training.
    """

    def __init__(self, ring: StepRing) -> None:
        self._ring = ring
        self._seen = 0
        self._prev_end_ns = 0
        self._phases: list[PhaseRecord] = []

    def rewind(self) -> None:
        """Make the next window carry the last ``MAX_RECENT_STEPS`` steps again.

        Called for each new session: a restarted sidecar has no step history,
        so its auto stall threshold would wait out the warm-up (up to
        ``startup_timeout_s``) for a rank that hung while it was down.
        """
        self._seen = max(0, self._ring.n - MAX_RECENT_STEPS)
        self._prev_end_ns = 0

    def read(self, active: list[PhaseRecord], finished: list[PhaseRecord]) -> StepWindow:
        ring = self._ring
        n = ring.n
        win = StepWindow(total_steps=n)
        if n == 0:
            return win
        self._phases.extend(finished)
        phases = [*self._phases, *active]
        first = max(self._seen, n - RING_SIZE)
        prev = self._prev_end_ns if first == self._seen else 0
        for k in range(first, n):
            end = ring.ends[k & RING_MASK]
            step = _as_int(ring.steps[k & RING_MASK], k + 1)
            dur = 0.0
            if k > 0 and prev and end >= prev and not _overlaps(prev, end, phases):
                dur = (end - prev) / 1e9
                win.count += 1
                win.sum_s += dur
                if dur > win.max_s:
                    win.max_s = dur
            if n - k <= MAX_RECENT_STEPS:
                win.recent_steps.append(step)
                win.recent_ends_ns.append(end)
                win.recent_s.append(dur)
            prev = end
        last = (n - 1) & RING_MASK
        win.last_step = _as_int(ring.steps[last], n)
        win.last_step_ns = ring.ends[last]
        self._seen = n
        self._prev_end_ns = prev
        # A finished phase can only matter to intervals that end after `prev`.
        self._phases = [p for p in self._phases if p.end_ns > prev]
        return win
