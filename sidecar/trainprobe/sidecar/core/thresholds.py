"""Stall threshold calibration, as plain functions over step-time samples.

``auto`` follows the design card: ``max(floor_s, p99_factor x p99)`` of the
step times observed, after ``warmup_steps`` samples. Before that the stall
threshold is the start-up timeout, because the first steps (compilation,
allocator warm-up, first checkpoint) are not representative. Like
nvidia-resiliency-ext's timeouts calculation, the job's ranks are merged by
taking the maximum, so one rank's fast steps never tighten another's limit.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass


class StepWindow:
    """The last ``maxlen`` step times in arrival order, also kept sorted.

    Appending costs a bisect and a memmove instead of a sort of the whole
    window per report, so the p99 is a lookup (the sidecar's report path
    computes it on every report).
    """

    __slots__ = ("_fifo", "_sorted", "maxlen")

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []

    def append(self, x: float) -> None:
        if len(self._fifo) == self.maxlen:
            oldest = self._fifo.popleft()
            del self._sorted[bisect_left(self._sorted, oldest)]
        self._fifo.append(x)
        insort(self._sorted, x)

    def extend(self, xs: Iterable[float]) -> None:
        for x in xs:
            self.append(x)

    def extend_positive(self, xs: Iterable[float]) -> int:
        """Append each of ``xs`` that is > 0; how many were appended.

        :meth:`append` inlined (the report path's inner loop: one method call
        per sample cost more than the bisect and memmove it does).
        """
        fifo, ordered, maxlen = self._fifo, self._sorted, self.maxlen
        # A full window stays full (each append follows a popleft): no len() a
        # sample once it is, as it is for every worker past its first reports.
        full = len(fifo) >= maxlen
        n = 0
        for x in xs:
            if x > 0:
                if full:
                    del ordered[bisect_left(ordered, fifo.popleft())]
                fifo.append(x)
                insort(ordered, x)
                n += 1
                if not full:
                    full = len(fifo) >= maxlen
        return n

    def __len__(self) -> int:
        return len(self._fifo)

    def __iter__(self) -> Iterator[float]:
        return iter(self._fifo)

    def sorted(self) -> list[float]:
        return self._sorted

    def p99(self) -> float | None:
        """:func:`p99` of the window, without a sort."""
        return _p99_of_sorted(self._sorted)


def p99(samples: Iterable[float]) -> float | None:
    """Nearest-rank 99th percentile; None without samples."""
    return _p99_of_sorted(sorted(samples))


def _p99_of_sorted(ordered: Sequence[float]) -> float | None:
    if not ordered:
        return None
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass(frozen=True)
class StallPolicy:
    """How the stall threshold is chosen. ``timeout_s=None`` means auto."""

    timeout_s: float | None = None
    #: The shipped default (config.Settings reads it from here): the rules give a
    #: verdict from 3 s; a kill waits for evidence or the patience (decision.py).
    floor_s: float = 3.0
    p99_factor: float = 10.0
    warmup_steps: int = 20
    startup_timeout_s: float = 600.0


@dataclass(frozen=True)
class StallThreshold:
    seconds: float
    #: "explicit", "auto" or "warmup", for the incident's evidence.
    basis: str
    p99_s: float | None = None
    samples: int = 0


def stall_threshold(
    policy: StallPolicy, sample_counts: Sequence[int], p99s: Sequence[float | None]
) -> StallThreshold:
    """The stall threshold for one job, from its ranks' sample counts and p99s."""
    if policy.timeout_s is not None:
        return StallThreshold(policy.timeout_s, "explicit")
    samples = max(sample_counts, default=0)
    known = [p for p in p99s if p is not None]
    if samples < policy.warmup_steps or not known:
        return StallThreshold(policy.startup_timeout_s, "warmup", None, samples)
    job_p99 = max(known)
    return StallThreshold(
        max(policy.floor_s, policy.p99_factor * job_p99), "auto", job_p99, samples
    )
