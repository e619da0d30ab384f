"""A sacrificial process that records every signal it is sent.

Usage: sacrifice.py RECORD_FILE [CMD ...]

Every catchable signal gets a handler that appends its name to RECORD_FILE,
so a test can prove that nobody signalled this process (SIGKILL and SIGSTOP
cannot be caught: a test sees those in /proc, as a dead or stopped process).
With CMD, the process runs it as a child and exits with it: as pid 1 of a new
PID namespace (``unshare --pid --fork``) it stands for init while CMD (the
sidecar) runs beneath it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

#: Signals a child's life sends us without anyone aiming at us.
_IGNORED = {signal.SIGCHLD, signal.SIGWINCH, signal.SIGURG}


def record_signals(path: str) -> None:
    """From now on, append the name of every catchable signal this process gets
    to ``path`` (impostor.py and scripted.py record theirs with it too)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def note(signum: int, _frame: object) -> None:
        os.write(fd, f"{signal.Signals(signum).name}\n".encode())

    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP) or sig in _IGNORED:
            continue
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # glibc's own
            signal.signal(sig, note)
    os.write(fd, b"ready\n")


def main() -> int:
    record_signals(sys.argv[1])
    if len(sys.argv) > 2:
        child = subprocess.Popen(sys.argv[2:])
        while child.poll() is None:
            time.sleep(0.1)
        return child.returncode
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
