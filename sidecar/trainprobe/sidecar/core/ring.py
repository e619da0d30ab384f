"""Fixed-size rings of numbers: a session's windows, without an object per number."""

from __future__ import annotations

from array import array
from typing import Any

__all__ = ["FloatRing", "Ring"]


class Ring:
    """The last ``maxlen`` items of ``width`` numbers each, oldest first, in one
    ``array`` (``typecode`` "d": floats, "q": ints): 8 bytes a number, where a
    deque of number objects (and of tuples of them) costs 40-170 bytes an
    item plus a 760-byte block (what a session costs:
    bench/session_structures.py). An item is a number for width 1, else a
    tuple."""

    __slots__ = ("_a", "_head", "maxlen", "width")

    def __init__(self, maxlen: int, width: int = 1, typecode: str = "d") -> None:
        self._a: array[Any] = array(typecode)
        self._head = 0  # the oldest item's index, once full
        self.maxlen = maxlen
        self.width = width

    def append(self, item: Any) -> None:
        try:
            self._append(item)
        except OverflowError:  # an int past 64 bits (a client's garbage): clamped
            lim = (1 << 63) - 1
            clamp = [max(-lim, min(lim, int(x))) for x in (item if self.width > 1 else (item,))]
            self._append(clamp if self.width > 1 else clamp[0])

    def _append(self, item: Any) -> None:
        a, w = self._a, self.width
        if len(a) < self.maxlen * w:
            if w == 1:
                a.append(item)
            else:
                a.extend(item)
            return
        h = self._head
        if w == 1:
            a[h] = item
        else:
            a[h * w : h * w + w] = array(a.typecode, item)
        self._head = h + 1 if h + 1 < self.maxlen else 0

    def extend(self, items: Any) -> None:
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return len(self._a) // self.width

    def __bool__(self) -> bool:
        return bool(self._a)

    def __getitem__(self, k: int) -> Any:
        n = len(self._a) // self.width
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("ring index out of range")
        i = (self._head + k) % n if n == self.maxlen else k
        w = self.width
        return self._a[i] if w == 1 else tuple(self._a[i * w : i * w + w])

    def __iter__(self) -> Any:
        return (self[k] for k in range(len(self)))

    def __reversed__(self) -> Any:
        return (self[k] for k in range(len(self) - 1, -1, -1))


#: The name it had when it held floats only.
FloatRing = Ring
