"""A Unix socket's directory and file, made safe before the sidecar listens.

The socket is 0600 in a 0700 directory, wider only as ``socket_access`` asks
(:data:`SOCKET_ACCESS`, for workers of another uid): whoever can connect can
report as a worker, so no one but the owner may ever write or list the
directory. A directory of ours that others could write is tightened; one of
another user, or a symlink, is refused (:class:`UnsafeListenDir`, the
programs exit with 2), since they could swap the socket for their own. A
leftover socket of a sidecar that died is replaced; a live one is not.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from pathlib import Path

from trainprobe.proto import UnsafeSocketDir, socket_dir_problem
from trainprobe.sidecar.transport.listen.listen_checks import ListenError

__all__ = ["SOCKET_ACCESS", "UnsafeListenDir", "prepare_unix_socket"]

log = logging.getLogger("trainprobe.sidecar")

#: ``socket_access`` -> (mode bits the socket directory must add, socket mode).
#: Connecting needs search (x) on the directory and write on the socket; no
#: one but the owner ever gets to write or list the directory.
SOCKET_ACCESS: dict[str, tuple[int, int]] = {
    "user": (0o700, 0o600),
    "group": (0o710, 0o660),
    "all": (0o711, 0o666),
}


class UnsafeListenDir(ListenError, UnsafeSocketDir):
    """A socket directory another user could write (the programs exit with 2)."""


def prepare_unix_socket(path: Path, access: str = "user") -> None:
    dir_mode = SOCKET_ACCESS[access][0]
    if not path.parent.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as err:
            raise ListenError(
                f"cannot create {path.parent} for unix://{path}: {err.strerror}; "
                "choose another --listen unix:///PATH or set TRAINPROBE_RUNTIME_DIR"
            ) from None
    if not path.parent.is_symlink() and not path.parent.is_dir():
        # A mistake in the path, not a directory another user controls: exit 1.
        raise ListenError(
            f"cannot listen on unix://{path}: {path.parent} is not a directory; choose "
            "another --listen unix:///PATH or set TRAINPROBE_RUNTIME_DIR"
        )
    # Checked after mkdir: another user may have made it first (mkdir then
    # leaves theirs in place).
    problem = socket_dir_problem(path.parent)
    if problem is not None and _tighten(path.parent):
        problem = socket_dir_problem(path.parent)
    if problem is not None:
        raise UnsafeListenDir(
            f"refusing to listen on unix://{path}: {problem}; choose another --listen "
            "unix:///PATH or set TRAINPROBE_RUNTIME_DIR"
        )
    _open_for(path.parent, dir_mode)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ListenError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(0.5)
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale socket of a sidecar that died
        else:
            raise ListenError(f"another sidecar is already listening on {path}")
        finally:
            probe.close()


def _tighten(directory: Path) -> bool:
    """Take write access from group and others on a directory of our own.

    Ours to fix, not to refuse (a root sidecar's emptyDir is its own too; a
    non-root one never gets here for a root-owned one: it uses its own
    ``trainprobe-<uid>`` inside it). Any other user's directory, or a
    symlink, is left alone (and refused).
    """
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False
    mode = stat.S_IMODE(st.st_mode)
    os.chmod(directory, mode & ~0o022)
    log.warning(
        "%s was writable by others (mode %04o); made it %04o", directory, mode, mode & ~0o022
    )
    return True


def _open_for(directory: Path, dir_mode: int) -> None:
    """Give the directory (ours) the search bits ``socket_access`` needs."""
    st = os.lstat(directory)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == os.geteuid() and mode & dir_mode != dir_mode:
        os.chmod(directory, mode | dir_mode)
