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
from array import array
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from heapq import nlargest

#: The range a step time is kept in, and the 16-bit log scale over it: one
#: code every 0.042 % (a p99 off by at most half that), 1 µs to 11.6 days.
_LO_S, _HI_S = 1e-6, 1e6
_CODES = 65535
_PER_LOG = _CODES / math.log(_HI_S / _LO_S)
_LOG_LO = math.log(_LO_S)


def _code(x: float) -> int:
    if x <= _LO_S:
        return 0
    if x >= _HI_S:
        return _CODES
    return round((math.log(x) - _LOG_LO) * _PER_LOG)


def _time(code: int) -> float:
    return math.exp(code / _PER_LOG + _LOG_LO)


def stored_step_time(x: float) -> float:
    """``x`` as a :class:`StepWindow` keeps it (within 0.021 %)."""
    return _time(_code(x))


class StepWindow:
    """The last ``maxlen`` step times in arrival order, and their largest few.

    A p99 needs only the largest ``maxlen // 100 + 1`` times of the window, so
    only about twice that is kept sorted (``_top``): an append is a store and a
    comparison, and the p99 is a lookup (the sidecar's report path computes it
    on every report). When the oldest time leaves while it is among the
    largest, the next :meth:`p99` rebuilds them from the window (once per
    report at most, however many samples it carried). Times are kept as 16-bit
    codes on a log scale (:func:`stored_step_time`), which keep their order,
    in a ring allocated at the first sample: 2 KB for a full window of 1,000.
    As 32-bit floats it was 4 KB, and as a deque and a sorted list of float
    objects 41 KB of each session's 46 (bench/bench_sessions.py).
    """

    __slots__ = ("_fifo", "_head", "_keep", "_top", "maxlen")

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        #: A ring of codes once full: ``_head`` is the oldest one's index.
        self._fifo: array[int] | None = None
        self._head = 0
        #: The ``len(_top)`` largest codes of the window, ascending (a multiset):
        #: an array, 2 bytes a code, where a list of int objects cost ~30.
        self._top: array[int] = array("H")
        # Twice what the p99 needs: a departing time that ties with the smallest
        # kept one (codes tie more often than floats) costs a rebuild less often.
        self._keep = maxlen // 50 + 2

    def append(self, x: float) -> None:
        self._add(_code(x))

    def _add(self, x: int) -> None:
        fifo, top = self._fifo, self._top
        if fifo is None:
            fifo = self._fifo = array("H")
        if len(fifo) == self.maxlen:
            head = self._head
            old = fifo[head]
            fifo[head] = x
            self._head = head + 1 if head + 1 < self.maxlen else 0
            if top and old >= top[0]:
                i = bisect_left(top, old)
                if i < len(top) and top[i] == old:
                    del top[i]
        else:
            fifo.append(x)
        # Still the largest len(top) (+1): a time below the smallest kept is not.
        if (not top or x >= top[0]) and (top or len(fifo) == 1):
            insort(top, x)
            if len(top) > self._keep:
                del top[0]

    def extend(self, xs: Iterable[float]) -> None:
        for x in xs:
            self.append(x)

    def extend_positive(self, xs: Iterable[float]) -> int:
        """Append each of ``xs`` that is > 0; how many were appended."""
        n = 0
        add, log, lo, hi, per, log_lo = self._add, math.log, _LO_S, _HI_S, _PER_LOG, _LOG_LO
        for x in xs:
            if x > 0:  # _code, inlined: this runs for every step time of every report
                add(0 if x <= lo else _CODES if x >= hi else round((log(x) - log_lo) * per))
                n += 1
        return n

    def __len__(self) -> int:
        return 0 if self._fifo is None else len(self._fifo)

    def _times(self) -> list[float]:
        fifo, h = self._fifo, self._head
        return [] if fifo is None else [_time(c) for c in (*fifo[h:], *fifo[:h])]

    def __iter__(self) -> Iterator[float]:
        return iter(self._times())

    def sorted(self) -> list[float]:
        return sorted(self._times())

    def p99(self) -> float | None:
        """:func:`p99` of the window, without a sort."""
        fifo = self._fifo
        if not fifo:
            return None
        n = len(fifo)
        k = n - max(0, math.ceil(0.99 * n) - 1)  # the p99 is the k-th largest
        top = self._top
        if len(top) < k:
            top[:] = array("H", sorted(nlargest(self._keep, fifo)))
        return _time(top[-k])


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
