"""The relaying node's bounded buffer of items waiting to go upstream.

Pure logic, no gRPC: items are ``(stream_id, kind, payload)`` tuples that the
node turns into ``RelayItem`` messages when it sends a batch. A report that
follows its stream's last buffered item, itself a report, is folded into it
(:mod:`.coalesce`): about two reports of each worker go upstream as one.
When the upstream is unreachable the buffer fills up; then the oldest
*report* goes first (a newer report supersedes it), so Hellos, Goodbyes,
stream ends and kill outcomes survive an outage as long as there is any
report to drop.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from typing import Any

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.relay.coalesce import MAX_FOLDED_BYTES, fold_into, parse_report


class Kind(enum.IntEnum):
    """What a buffered item is; only the node's relay code gives it meaning."""

    HELLO = 0
    REPORT = 1
    #: Any other WorkerMessage (Goodbye, CommandResult, something unparsable).
    MESSAGE = 2
    ENDED = 3
    KILL_RESULT = 4


Item = tuple[int, Kind, Any]


class Folded:
    """A buffered report as a parsed message, open to fold newer ones into.

    ``reports`` counts the hook reports it carries, so a dropped one is
    counted as what it was; ``size`` the bytes they came as. It is serialized
    once, when its batch is sent.
    """

    __slots__ = ("report", "reports", "size")

    def __init__(self, report: probe_pb2.Report, size: int) -> None:
        self.report = report
        self.reports = 1
        self.size = size

    def fold(self, data: bytes) -> bool:
        """Fold a newer report's bytes in; False if they stay a separate item."""
        if self.size + len(data) > MAX_FOLDED_BYTES:
            return False
        newer = parse_report(data)
        if newer is None or not fold_into(self.report, newer):
            return False
        self.reports += 1
        self.size += len(data)
        return True

    def serialize(self) -> bytes:
        return probe_pb2.WorkerMessage(report=self.report).SerializeToString()


def _opened(data: bytes) -> Folded | None:
    """A report to fold later ones into; None (sent as it came, the upstream
    refusing it with its own reason if it is bad) for anything else."""
    report = parse_report(data)
    return None if report is None else Folded(report, len(data))


def _tag(body: str) -> bytes:
    """The first byte of a serialized WorkerMessage whose body is ``body``: its
    field number, length-delimited (wire type 2). Read from the proto itself,
    so the node classifies a worker's message without parsing it."""
    number = probe_pb2.WorkerMessage.DESCRIPTOR.fields_by_name[body].number
    return bytes([number << 3 | 2])


HELLO_TAG, REPORT_TAG, GOODBYE_TAG = _tag("hello"), _tag("report"), _tag("goodbye")


def kind_of(message: bytes) -> Kind:
    """Classify a serialized WorkerMessage by its first tag byte."""
    head = message[:1]
    if head == REPORT_TAG:
        return Kind.REPORT
    return Kind.HELLO if head == HELLO_TAG else Kind.MESSAGE


class RelayBuffer:
    """A FIFO of items holding at most ``max_items`` messages, shedding the oldest
    reports. A folded report counts as every message in it, so folding never
    lets the buffer hold more than it did without (its memory bound)."""

    def __init__(self, max_items: int) -> None:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self.max_items = max_items
        self._items: deque[Item] = deque()
        #: Each stream's last item, when it is a report still open to folding.
        self._open: dict[int, Folded] = {}
        #: Messages held: items, plus the reports folded into them.
        self._held = 0
        #: Items dropped since the last :meth:`take` (sent upstream as a count).
        self.dropped = 0
        #: Items dropped over the buffer's life.
        self.dropped_total = 0

    def __len__(self) -> int:
        return len(self._items)

    def add(self, stream_id: int, kind: Kind, payload: Any) -> bool:
        """Append an item, or fold a report into its stream's last; True if
        that made room by dropping an older one."""
        if kind is Kind.REPORT:
            last = self._open.get(stream_id)
            # A full buffer takes a new report as a new item, so that shedding
            # drops the older ones and never this one with them.
            if last is not None and self._held < self.max_items and last.fold(payload):
                self._held += 1
                return False
            folded = _opened(payload)
            if folded is None:
                self._open.pop(stream_id, None)
            else:
                self._open[stream_id] = folded
                payload = folded
        else:
            # Nothing folds across another item of the stream: order is kept.
            self._open.pop(stream_id, None)
        self._items.append((stream_id, kind, payload))
        self._held += 1
        return self._shed()

    def _shed(self) -> bool:
        if self._held <= self.max_items:
            return False
        while self._held > self.max_items:
            self._drop_one()
        return True

    def _drop_one(self) -> None:
        for i, item in enumerate(self._items):
            if item[1] is Kind.REPORT:
                del self._items[i]
                break
        else:  # nothing but control items: the oldest of them goes
            item = self._items.popleft()
        sid, _, payload = item
        n = 1
        if isinstance(payload, Folded):
            n = payload.reports
            if self._open.get(sid) is payload:
                del self._open[sid]
        self._held -= n
        self.dropped += n
        self.dropped_total += n

    def take(self) -> tuple[list[Item], int]:
        """Everything buffered, oldest first, and the drops since the last take."""
        items, dropped = list(self._items), self.dropped
        self._items.clear()
        self._open.clear()
        self._held = 0
        self.dropped = 0
        return items, dropped

    def resume(self, hellos: Iterable[tuple[int, bytes]]) -> None:
        """Prepare for a new upstream stream: the given live streams' Hellos first.

        A new stream starts with no session open upstream, so every live
        worker's Hello goes first; buffered Hellos are dropped, since the
        streams still alive are among ``hellos`` and the others have ended.
        """
        rest = [item for item in self._items if item[1] is not Kind.HELLO]
        self._open.clear()
        self._items = deque([(sid, Kind.HELLO, hello) for sid, hello in hellos])
        self._items.extend(rest)
        self._held = sum(p.reports if isinstance(p, Folded) else 1 for _, _, p in self._items)
        self._shed()
