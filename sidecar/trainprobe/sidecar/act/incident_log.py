"""The incident log: JSON Lines, append-only, each line flushed and fsync'd.

Writes go through one background thread so that a slow disk never delays
the rules or the actions, and lines keep their order.

A full disk cuts a write short: part of the line is on disk, the rest is
not. Every line on disk must still be a whole record, so a cut line is
truncated away again (or, if even that fails, the next write starts with a
newline), and the record is held in memory (at most :data:`MAX_HELD`) and
written, in order, before the next one once space is back.

With ``max_bytes``, a log that a record would take past that size is first
rotated, on the same writer thread and between two records (so none is lost
or split): ``incidents.jsonl`` becomes ``incidents.jsonl.1``, ``.1`` becomes
``.2`` and so on, ``rotated_files`` of them kept. :func:`log_set` gives the set
oldest first, as the readers read it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trainprobe.sidecar.core.log_rotation import in_read_order, rotated_name

__all__ = [
    "MAX_HELD",
    "IncidentLog",
    "IncidentLogError",
    "log_set",
    "read_incident_log",
    "rotated",
]

log = logging.getLogger("trainprobe.sidecar")

#: Most records held in memory while the log cannot be written (oldest dropped).
MAX_HELD = 1024


class IncidentLogError(RuntimeError):
    """An incident log that cannot be opened for appending (said in one line at start)."""


class IncidentLog:
    """Appends records to ``path``; the last ``keep`` stay in memory too."""

    def __init__(
        self, path: Path, keep: int = 256, max_bytes: int = 0, rotated_files: int = 1
    ) -> None:
        self.path = path
        #: Rotate before a record would take the log past this size (0: never).
        self.max_bytes = max_bytes
        self.rotated_files = max(1, rotated_files)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd, self._seekable = _open_for_append(path)
        except OSError as err:
            # At start, so that a sidecar that could not record its kills never runs.
            raise IncidentLogError(
                f"cannot open the incident log {path} for appending: {err.strerror} "
                f"(set --incident-log or --state-dir)"
            ) from None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainprobe-incidents")
        self._lock = threading.Lock()
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self._failed = False
        self._rotate_failed = False
        self._closed = False
        #: Records not yet on disk, oldest first (the disk was full).
        self._held: deque[bytes] = deque()
        self._dropped = 0
        #: The next record must start on a fresh line: the file may end in a cut
        #: one (a crash or a failed write). Only a regular file can be looked at.
        self._torn = self._seekable

    def write(self, record: dict[str, Any]) -> Future[None]:
        """Queue one record; the returned future completes once it is on disk."""
        self.recent.append(record)
        line = (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode()
        if self._closed:  # a late record after stop: written inline, never a crash
            done: Future[None] = Future()
            self._append_fd_once(line)
            done.set_result(None)
            return done
        return self._pool.submit(self._append, line)

    def _append(self, line: bytes) -> None:
        with self._lock:
            self._append_held(line)
            self._drain()

    def _append_held(self, line: bytes) -> None:
        if len(self._held) >= MAX_HELD:
            self._held.popleft()
            self._dropped += 1
        self._held.append(line)

    def _drain(self) -> None:
        """Write the held records in order; stop at the first that fails."""
        written = 0
        while self._held:
            line = self._held[0]
            try:
                if self._torn:
                    self._end_line()
                start = os.lseek(self._fd, 0, os.SEEK_END) if self._seekable else -1
                # A record larger than max_bytes goes alone into a file of its own.
                if start > 0 and 0 < self.max_bytes < start + len(line) and self._rotate():
                    if self._torn:  # a file that was there already
                        self._end_line()
                    start = os.lseek(self._fd, 0, os.SEEK_END)
                written = 0
                while written < len(line):
                    written += os.write(self._fd, line[written:])
            except OSError as err:
                self._failure(err, written, len(line))
                if written:
                    self._cut_back(start)
                return
            self._held.popleft()
            try:
                os.fsync(self._fd)
            except OSError as err:  # on disk as far as the page cache goes: not rewritten
                log.error("cannot fsync incident log %s: %s", self.path, err)
        if self._failed:
            lost = f"; {self._dropped} older records were dropped" if self._dropped else ""
            log.warning("incident log %s is writable again%s", self.path, lost)
            self._failed, self._dropped = False, 0

    def _rotate(self) -> bool:
        """Move the log aside (``.1``, ``.1`` to ``.2``, ...) and open a new one;
        on failure, say so once and go on appending to the current file."""
        try:
            aside = [p for p in log_set(self.path) if p != self.path]
            for old in aside[: max(0, len(aside) - self.rotated_files + 1)]:
                old.unlink()  # the oldest, beyond the files to keep
            for n in range(self.rotated_files - 1, 0, -1):
                if (older := rotated(self.path, n)).exists():
                    os.replace(older, rotated(self.path, n + 1))
            os.replace(self.path, rotated(self.path, 1))
            fd, self._seekable = _open_for_append(self.path, fresh=True)
        except OSError as err:
            # Once until a rotation works: something in the directory (a
            # directory named like a rotated file) may refuse every one.
            if not self._failed and not self._rotate_failed:
                log.error("cannot rotate incident log %s: %s; still appending", self.path, err)
            self._rotate_failed = True
            return False
        self._rotate_failed = False
        os.close(self._fd)
        self._fd, self._torn = fd, self._seekable
        return True

    def _end_line(self) -> None:
        """Start the next record on a fresh line if the file ends in a cut one."""
        cut = True  # a pipe or a terminal: cut by a failed write, nothing to look at
        if self._seekable:
            size = os.lseek(self._fd, 0, os.SEEK_END)
            cut = size > 0 and os.pread(self._fd, 1, size - 1) != b"\n"
        if cut and os.write(self._fd, b"\n") != 1:
            raise OSError(errno.ENOSPC, "no room for a newline")
        self._torn = False

    def _cut_back(self, start: int) -> None:
        """Remove a cut record's part (shrinking needs no space)."""
        try:
            if start < 0:
                raise OSError(errno.ESPIPE, "not a regular file")
            os.ftruncate(self._fd, start)
        except OSError:
            self._torn = True  # the next write begins with a newline instead

    def _failure(self, err: OSError, written: int, size: int) -> None:
        if not self._failed:  # say it once, not per record
            log.error(
                "cannot write incident log %s: wrote %d of %d bytes: %s; holding the record "
                "(up to %d) until the disk takes it",
                self.path,
                written,
                size,
                err,
                MAX_HELD,
            )
        self._failed = True

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until every queued record is written."""
        if self._closed:
            return
        self._pool.submit(lambda: None).result(timeout=timeout_s)

    def close(self) -> None:
        """Write what is queued, stop the writer thread and close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        if self._held:  # one last try for records the disk refused
            with self._lock:
                self._drain()
        os.close(self._fd)
        self._fd = -1

    def _append_fd_once(self, line: bytes) -> None:
        """One record after close, by the same rules (whole, on a fresh line)."""
        try:
            fd, self._seekable = _open_for_append(self.path)
        except OSError as err:
            log.error("cannot write incident log %s: %s", self.path, err)
            return
        with self._lock:
            self._fd, self._torn = fd, self._seekable
            try:
                self._append_held(line)
                self._drain()
            finally:
                os.close(fd)
                self._fd = -1


def _open_for_append(path: Path, fresh: bool = False) -> tuple[int, bool]:
    """An append descriptor, and whether its end can be read back (a regular
    file opened for reading too) to tell whether it ends in a cut line.

    ``fresh``: a new file the rotation just made room for, created here or
    not at all: whoever can write the directory could have put a link at
    the name between the rename and this open (a root sidecar would append
    to the file it points to)."""
    flags = os.O_APPEND | os.O_CREAT | (os.O_EXCL | os.O_NOFOLLOW if fresh else 0)
    try:
        fd = os.open(path, os.O_RDWR | flags, 0o640)
    except PermissionError:  # a log we may append to but not read
        return os.open(path, os.O_WRONLY | flags, 0o640), False
    return fd, stat.S_ISREG(os.fstat(fd).st_mode)


def rotated(path: Path, n: int) -> Path:
    """The ``n``-th newest rotated file of the log at ``path``."""
    return path.with_name(rotated_name(path.name, n))


def log_set(path: Path) -> list[Path]:
    """The log's rotated files, oldest first, then the log itself: those that exist."""
    try:
        names = os.listdir(path.parent)
    except OSError:  # a directory we may pass through but not list: the log alone
        return [path] if path.exists() else []
    return [path.with_name(n) for n in in_read_order(path.name, names)]


def read_incident_log(path: Path) -> list[dict[str, Any]]:
    """Parse a log written by :class:`IncidentLog`, skipping a torn last line."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
