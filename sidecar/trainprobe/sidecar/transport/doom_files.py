"""Kill decisions written down, for the trainer's evidence-only liveness probe.

``<socket dir>/doomed/<pid>`` holds the start time (clock ticks) of a process
this sidecar verified and decided to kill; it is removed once that process
is gone. :func:`trainprobe.proto.liveness.liveness_script` reads them from
the trainer's container, so the kubelet restarts the trainer on this
evidence only, never because the sidecar did not answer.

A write is one small file on a local directory, made aside and renamed into
place (a probe never reads half a number); one that fails (a full or
read-only disk) is logged once and costs only this signal: the gRPC health
service ``trainprobe.workers`` still says it, to a probe that asks it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from trainprobe.proto.liveness import DOOMED_DIR_NAME
from trainprobe.sidecar.act.procs import lives

__all__ = ["DoomFiles"]

log = logging.getLogger("trainprobe.sidecar")


class DoomFiles:
    """The ``doomed/`` directory beside a socket this sidecar listens on."""

    def __init__(self, socket_dir: Path) -> None:
        self.dir = socket_dir / DOOMED_DIR_NAME
        self._warned = False
        try:
            # 0755: a trainer of another UID (a 0711 socket directory) lists it;
            # only this UID writes it, as only it writes the socket directory.
            self.dir.mkdir(mode=0o755, exist_ok=True)
            os.chmod(self.dir, 0o755)
        except OSError as err:
            self._warn(err)
        self.prune()

    def _warn(self, err: OSError) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "cannot write kill decisions in %s (%s): the trainer's exec liveness probe "
                "will not see them (only the gRPC health service trainprobe.workers says them)",
                self.dir,
                err.strerror or err,
            )

    def add(self, pid: int, start_ticks: int | None) -> None:
        if start_ticks is None:
            return  # nothing the probe could match: it never restarts on a guess
        tmp = self.dir / f".{pid}.tmp"
        try:
            # Made anew, never opened as found: a FIFO left there would block the loop.
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK
            fd = os.open(tmp, flags, 0o644)
            try:
                os.write(fd, str(start_ticks).encode())
            finally:
                os.close(fd)
            os.replace(tmp, self.dir / str(pid))
        except OSError as err:
            self._warn(err)
            with contextlib.suppress(OSError):
                tmp.unlink()

    def remove(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            (self.dir / str(pid)).unlink()

    def prune(self) -> None:
        """Remove the files of processes gone (a previous sidecar's, say)."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in names:
            if not (name.isascii() and name.isdigit()):  # "²" is a digit to isdigit()
                continue
            pid = int(name)
            try:
                ticks = int((self.dir / name).read_text(encoding="ascii") or "0")
            except (OSError, ValueError):
                ticks = -1
            if not lives(pid, ticks):
                self.remove(pid)
