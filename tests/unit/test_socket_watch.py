"""The hook's view of its sidecar's socket file (hooks/trainprobe/hooks/report/socket_watch.py).

Real files and real Unix sockets in a private temporary directory.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from trainprobe.hooks.report.socket_watch import (
    TCP_RETRY_CAP_S,
    SocketWatch,
    UnsafeTarget,
    unix_socket_path,
)


def _bind(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    return s


def test_unix_targets_are_watched_and_tcp_ones_retried_within_a_second() -> None:
    assert unix_socket_path("unix:///run/tp/s.sock") == Path("/run/tp/s.sock")
    assert unix_socket_path("unix:/run/tp/s.sock") == Path("/run/tp/s.sock")
    assert unix_socket_path("127.0.0.1:7070") is None
    tcp = SocketWatch("127.0.0.1:7070")
    assert not tcp.watching and not tcp.changed()
    assert tcp.retry_delay(4.0, permanent=False) == TCP_RETRY_CAP_S
    assert tcp.retry_delay(4.0, permanent=True) == 4.0  # a wrong token waits the whole cap
    assert SocketWatch("unix:///x/s.sock").retry_delay(4.0, permanent=False) == 4.0


def test_a_new_socket_file_is_noticed_and_the_same_one_is_not(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    watch = SocketWatch(f"unix://{path}")
    assert watch.note_failure() is False  # no file: nothing new
    assert not watch.changed()
    old = _bind(path)  # a sidecar starts
    assert watch.changed()
    assert watch.note_failure() is True  # failed on a new file: try again soon
    assert watch.note_failure() is False and not watch.changed()  # the same file again
    old.close()
    path.unlink()  # killed -9 and its successor removed the stale socket...
    assert watch.changed()
    new = _bind(path)  # ...and bound its own
    try:
        assert watch.changed() and watch.note_failure() is True
    finally:
        new.close()


def test_a_socket_in_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "rt"
    d.mkdir(mode=0o700)
    watch = SocketWatch(f"unix://{d}/s.sock")
    watch.check_safe()
    os.chmod(d, 0o770)
    with pytest.raises(UnsafeTarget, match="writable by others"):
        watch.check_safe()
    os.chmod(d, 0o700)
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(UnsafeTarget, match="symbolic link"):
        SocketWatch(f"unix://{link}/s.sock").check_safe()
