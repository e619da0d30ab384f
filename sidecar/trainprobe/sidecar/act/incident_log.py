"""The incident log: JSON Lines, append-only, each line flushed and fsync'd.

Writes go through one background thread so that a slow disk never delays
the rules or the actions, and lines keep their order.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

log = logging.getLogger("trainprobe.sidecar")


class IncidentLogError(RuntimeError):
    """An incident log that cannot be opened for appending (said in one line at start)."""


class IncidentLog:
    """Appends records to ``path``; the last ``keep`` stay in memory too."""

    def __init__(self, path: Path, keep: int = 256) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
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
        self._closed = False

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
            try:
                os.write(self._fd, line)
                os.fsync(self._fd)
                self._failed = False
            except OSError as err:
                if not self._failed:  # say it once, not per record
                    log.error("cannot write incident log %s: %s", self.path, err)
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
        os.close(self._fd)
        self._fd = -1

    def _append_fd_once(self, line: bytes) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        except OSError as err:
            log.error("cannot write incident log %s: %s", self.path, err)
            return
        try:
            os.write(fd, line)
            os.fsync(fd)
        except OSError as err:
            log.error("cannot write incident log %s: %s", self.path, err)
        finally:
            os.close(fd)


def read_incident_log(path: Path) -> list[dict[str, Any]]:
    """Parse a log written by :class:`IncidentLog`, skipping a torn last line."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
