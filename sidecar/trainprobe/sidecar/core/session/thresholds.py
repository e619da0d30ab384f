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
from bisect import insort
from collections.abc import Iterable, Sequence
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
    """The p99 of about the last ``maxlen`` step times, in a few hundred bytes.

    A p99 needs only the largest ``k`` times of its window (``k`` is 11 for a
    window of 1,000 to 1,099), and the largest ``k`` of a union are among the
    largest ``k`` of each part. So the times go into blocks of ``maxlen // 10``,
    and of each block only its largest ``k`` are kept, sorted: the block being
    filled and the last 10 complete ones, 11 x 11 16-bit codes for a window of
    1,000 (the whole window as codes was 2 KB a session, 20 MB at 10,000).
    The window is exact: the last ``len(window)`` times, which once full is
    ``maxlen`` (rounded up to whole blocks) plus the block being filled: 1,000
    to 1,099. Times are 16-bit
    codes on a log scale (:func:`stored_step_time`), which keep their order.
    An append is a comparison with the block's smallest kept code (and an
    insertion when larger); a completed block costs one merge of 110 codes;
    the p99 merges two sorted runs of at most ``k``.
    """

    __slots__ = (
        "_blocks",
        "_cur",
        "_done",
        "_filled",
        "_head",
        "_k",
        "_n_cur",
        "_nblocks",
        "_span",
        "maxlen",
    )

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        #: Times a block spans, and complete blocks kept (``maxlen`` of times).
        self._span = max(1, maxlen // 10)
        self._nblocks = max(1, -(-maxlen // self._span))
        #: The most a p99 over the largest window (maxlen + span - 1) needs.
        most = self._nblocks * self._span + self._span - 1
        self._k = most - max(0, math.ceil(0.99 * most) - 1)
        #: Complete blocks' largest ``_k`` codes each, ascending within a block, in
        #: a ring of ``nblocks`` (allocated at the first complete block).
        self._blocks: array[int] | None = None
        self._head = 0  # the slot the next complete block takes
        self._filled = 0  # complete blocks in the ring
        #: The block being filled: its largest ``_k`` codes, ascending, and its count.
        self._cur: array[int] = array("H")
        self._n_cur = 0
        #: The largest ``_k`` codes of the complete blocks, ascending.
        self._done: array[int] = array("H")

    def append(self, x: float) -> None:
        self._add(_code(x))

    def _add(self, x: int) -> None:
        cur = self._cur
        if len(cur) < self._k:
            insort(cur, x)
        elif x > cur[0]:
            del cur[0]
            insort(cur, x)
        self._n_cur += 1
        if self._n_cur == self._span:
            self._complete()

    def _complete(self) -> None:
        k, cur, nblocks = self._k, self._cur, self._nblocks
        blocks = self._blocks
        if blocks is None:
            blocks = self._blocks = array("H", bytes(2 * k * nblocks))
        # A block of fewer than k times (tiny windows) is padded with code 0, below
        # every time but equal to the clamped ones: the k-th largest is unchanged.
        at = self._head * k
        blocks[at : at + k] = array("H", bytes(2 * (k - len(cur)))) + cur
        self._head = (self._head + 1) % nblocks
        self._filled = min(self._filled + 1, nblocks)
        self._done = array("H", sorted(nlargest(k, blocks)))
        self._cur = array("H")
        self._n_cur = 0

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
        return self._filled * self._span + self._n_cur

    def kept(self) -> tuple[int, bytes, bytes]:
        """What the window holds (count, block codes, the filling block's codes):
        equal for two windows that were fed the same times in the same blocks."""
        blocks = b"" if self._blocks is None else self._blocks.tobytes()
        return len(self), blocks, self._cur.tobytes()

    def p99(self) -> float | None:
        """:func:`p99` of the window's times, without a sort of them."""
        n = len(self)
        if not n:
            return None
        k = n - max(0, math.ceil(0.99 * n) - 1)  # the p99 is the k-th largest
        done, cur = self._done, self._cur
        if not self._filled:
            return _time(cur[-k])
        if not cur or cur[-1] <= done[-k]:  # the filling block changes nothing
            return _time(done[-k])
        return _time(sorted((*done[-k:], *cur[-k:]))[-k])


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
