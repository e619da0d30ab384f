"""Explicit-bucket histograms folded in plain Python, read once per collection.

Why: the OpenTelemetry SDK's ``Histogram.record`` copies and hashes the
attributes, takes two locks and offers an exemplar on every call, which at job
scale (one call per step time, per sampled collective and per arrival lag)
was most of the telemetry's cost. Here each report adds its values to a
bucket-count row found by a plain tuple key; each metrics reader (the OTLP
export timer, a Prometheus scrape) then takes what accumulated since any
reader last collected, once, and gets the same data points the SDK would have
built: per attribute set the count, sum, min, max and bucket counts
(``bisect_left``, so a value equal to a bound falls in that bound's bucket),
with cumulative or delta temporality, and the SDK's cardinality limit (2,000
attribute sets per instrument, the rest folded into one
``otel.metric.overflow=true`` set).

Pure: no OpenTelemetry import. Thread-safe: reports are recorded on the
sidecar's loop, readers collect on their own threads.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from trainprobe.sidecar.otel.traces.spans import AttrValue

#: The SDK's default cardinality limit per instrument and reader.
CARDINALITY_LIMIT = 2000
OVERFLOW_ATTRIBUTES: dict[str, AttrValue] = {"otel.metric.overflow": True}
_OVERFLOW = ("\0overflow",)
#: Attribute sets one window holds at most before it folds new ones into the
#: overflow set: bounds memory when no reader collects (Prometheus, unscraped).
WINDOW_LIMIT = 4 * CARDINALITY_LIMIT


class Row:
    """One attribute set's bucket counts, sum, min and max."""

    __slots__ = ("counts", "high", "low", "start_ns", "total")

    def __init__(self, buckets: int, start_ns: int) -> None:
        self.counts = [0] * buckets
        self.total = 0.0
        self.low = math.inf
        self.high = -math.inf
        self.start_ns = start_ns

    def merge(self, other: Row) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total = other.total + self.total  # the SDK's order: window + previous
        self.low = min(other.low, self.low)
        self.high = max(other.high, self.high)


@dataclass(frozen=True)
class HistPoint:
    """What an SDK ``HistogramDataPoint`` carries."""

    attributes: dict[str, AttrValue]
    start_time_unix_nano: int
    time_unix_nano: int
    count: int
    sum: float
    bucket_counts: tuple[int, ...]
    explicit_bounds: tuple[float, ...]
    min: float
    max: float


class _Reader:
    __slots__ = ("delta", "last_ns", "rows")

    def __init__(self, delta: bool, now_ns: int) -> None:
        self.delta = delta
        self.rows: dict[Hashable, Row] = {}
        #: Delta: when this reader last collected (the start of its next points).
        self.last_ns = now_ns


class FoldedHistogram:
    """One histogram instrument: values in per attribute-value tuple, points out per reader.

    ``names`` are the attribute names, in the order of the key tuples given to
    :meth:`record`.
    """

    def __init__(
        self,
        bounds: Sequence[float],
        names: Sequence[str],
        limit: int = CARDINALITY_LIMIT,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.bounds = tuple(bounds)  # as given: Prometheus writes le="1", not "1.0"
        self.names = tuple(names)
        self.limit = limit
        self._clock_ns = clock_ns
        #: Guards the window; held by readers only to swap it out, so a collection
        #: (which can take milliseconds and be descheduled) never holds up a report.
        self._lock = threading.Lock()
        #: Guards the readers' rows (taken first when both are).
        self._readers_lock = threading.Lock()
        self._window: dict[Hashable, Row] = {}
        self._readers: dict[object, _Reader] = {}

    # -- the report path (the sidecar's loop) ------------------------------------

    def record(
        self, key: tuple[AttrValue, ...], values: Iterable[float], positive: bool = False
    ) -> None:
        """Add ``values`` to the attribute set ``key``. Negative ones are dropped, as
        the SDK drops them; with ``positive``, zeros too."""
        bounds = self.bounds
        with self._lock:
            row = self._window.get(key)
            for v in values:
                if v <= 0 and (positive or v < 0):
                    continue
                if row is None:
                    row = self._row(key)
                row.counts[bisect_left(bounds, v)] += 1
                row.total += v
                if v < row.low:
                    row.low = v
                if v > row.high:
                    row.high = v

    def _row(self, key: Hashable) -> Row:
        window = self._window
        if len(window) >= WINDOW_LIMIT:
            key = _OVERFLOW
            row = window.get(key)
            if row is not None:
                return row
        row = window[key] = Row(len(self.bounds) + 1, self._clock_ns())
        return row

    # -- readers (their own threads) -------------------------------------------------

    def add_reader(self, reader: object, delta: bool = False) -> None:
        """Register a reader: it gets every value recorded from now on."""
        with self._readers_lock:
            self._fold()
            self._readers[reader] = _Reader(delta, self._clock_ns())

    def is_delta(self, reader: object) -> bool:
        return self._readers[reader].delta

    def collect(self, reader: object) -> list[HistPoint]:
        """The reader's points now: since it started (cumulative) or since its last
        collection (delta); no point for an attribute set without values."""
        with self._readers_lock:
            self._fold()
            state = self._readers[reader]
            now = self._clock_ns()
            rows = state.rows
            if state.delta:
                start, state.rows, state.last_ns = state.last_ns, {}, now
            points = [
                HistPoint(
                    attributes=self._attributes(key),
                    start_time_unix_nano=start if state.delta else row.start_ns,
                    time_unix_nano=now,
                    count=sum(row.counts),
                    sum=row.total,
                    bucket_counts=tuple(row.counts),
                    explicit_bounds=self.bounds,
                    min=row.low,
                    max=row.high,
                )
                for key, row in rows.items()
            ]
        return points

    def _fold(self) -> None:
        """Hand the window to every reader (called with the readers' lock held)."""
        with self._lock:
            window, self._window = self._window, {}
        if not window:
            return
        for state in self._readers.values():
            rows = state.rows
            for key, row in window.items():
                mine = rows.get(key)
                if mine is None:
                    if len(rows) >= self.limit and key != _OVERFLOW:
                        mine = rows.get(_OVERFLOW)
                        if mine is None:
                            mine = rows[_OVERFLOW] = Row(len(row.counts), row.start_ns)
                    else:
                        mine = rows[key] = Row(len(row.counts), row.start_ns)
                mine.merge(row)

    def _attributes(self, key: Hashable) -> dict[str, AttrValue]:
        if key == _OVERFLOW:
            return dict(OVERFLOW_ATTRIBUTES)
        assert isinstance(key, tuple)
        return dict(zip(self.names, key, strict=True))
