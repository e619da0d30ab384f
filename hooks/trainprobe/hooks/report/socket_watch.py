"""The reporter's view of its sidecar's Unix socket: safe to use, and new?

A restarted sidecar gets its hooks back within a second without a busy loop:
while away from a Unix socket, the reporter looks at the socket file (one
``stat``, :data:`SOCKET_WATCH_S` apart) and retries at once when a new one
appears. Over TCP, where there is nothing to watch, transient failures are
retried at least every :data:`TCP_RETRY_CAP_S`.

A socket in a directory another user could write is never used: that user
could have swapped it (docs/SECURITY.md, "Runtime directory and secrets").
"""

from __future__ import annotations

import os
from pathlib import Path

from trainprobe.proto import socket_dir_problem

__all__ = ["SOCKET_WATCH_S", "TCP_RETRY_CAP_S", "SocketWatch", "UnsafeTarget", "unix_socket_path"]

#: How often an absent sidecar's Unix socket file is looked at.
SOCKET_WATCH_S = 0.2
#: Longest wait between tries after a transient failure over TCP.
TCP_RETRY_CAP_S = 1.0


class UnsafeTarget(Exception):
    """A Unix socket in a directory another user could write."""


def unix_socket_path(target: str) -> Path | None:
    """The socket file of a gRPC ``unix:`` target; None for TCP."""
    if not target.startswith("unix:"):
        return None
    return Path("/" + target[len("unix:") :].lstrip("/"))


def _file_id(path: Path) -> tuple[int, int, int] | None:
    """What changes when a sidecar binds its socket anew (None: no file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


class SocketWatch:
    """The socket file of one target, as it was when the last try failed."""

    def __init__(self, target: str) -> None:
        self.path = unix_socket_path(target)
        self._failed_on: tuple[int, int, int] | None = None

    @property
    def watching(self) -> bool:
        return self.path is not None

    def check_safe(self) -> None:
        """Raise :class:`UnsafeTarget` if another user could write the socket's directory."""
        if self.path is not None:
            problem = socket_dir_problem(self.path.parent)
            if problem is not None:
                raise UnsafeTarget(f"not connecting: {problem}")

    def note_failure(self) -> bool:
        """Remember the socket file a try failed on; True if it is not the last one's.

        A new file means a new sidecar, bound but perhaps not yet serving:
        worth another try soon rather than after the whole backoff.
        """
        if self.path is None:
            return False
        seen, self._failed_on = self._failed_on, _file_id(self.path)
        return self._failed_on is not None and self._failed_on != seen

    def changed(self) -> bool:
        """Whether the socket file is not the one the last try failed on."""
        return self.path is not None and _file_id(self.path) != self._failed_on

    def retry_delay(self, delay_s: float, permanent: bool) -> float:
        """The backoff's delay, capped for transient failures over TCP."""
        if self.path is None and not permanent:
            return min(delay_s, TCP_RETRY_CAP_S)
        return delay_s
