"""The one way out of the ``trainprobe`` command: every line it writes is escaped.

Each command escapes the client strings it formats (:func:`printable`), but a
path added later, an error line quoting a gRPC status's details, a warning
naming a log file, an argparse message: each one missed was a way for a job id
to retitle or clear the operator's terminal. So the command's stdout and
stderr are themselves wrapped (:class:`SafeStream`): whatever is written
reaches the terminal with its control characters (C0 but newline and tab, DEL,
C1, ESC among them) and invisible format characters escaped. ``top`` on a
terminal is the one exception: rich writes its own styling there, and top
gives rich only escaped plain text.

A closed pipe (``trainprobe incidents --json | head``) ends the command
quietly, as it ends any other Unix filter: no traceback, exit status 141
(128 + SIGPIPE), as a shell reports for a filter that SIGPIPE killed.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

from trainprobe.sidecar.core.text import printable_lines

__all__ = [
    "BROKEN_PIPE_EXIT",
    "SafeStream",
    "guarded_output",
    "quiet_broken_pipe",
    "styled_stdout",
]

#: The status a shell gives a filter that SIGPIPE ended.
BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE


class SafeStream(io.TextIOBase):
    """A text stream that escapes what it is given and writes it to ``raw``."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(printable_lines(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.raw, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw, "errors", None)


@contextlib.contextmanager
def guarded_output(stdout: bool = True) -> Iterator[None]:
    """``sys.stderr`` (and ``sys.stdout`` unless told not to) escaped while inside."""
    saved = sys.stdout, sys.stderr
    sys.stderr = SafeStream(saved[1])
    if stdout:
        sys.stdout = SafeStream(saved[0])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def quiet_broken_pipe(main: Callable[[], int]) -> int:
    """``main()``, flushed; a reader that went away ends it with :data:`BROKEN_PIPE_EXIT`."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # What is still buffered would fail again at exit, with a message:
        # stdout goes to /dev/null for the rest of the process.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT


@contextlib.contextmanager
def styled_stdout() -> Iterator[None]:
    """The raw stdout while inside, if it is a terminal: for rich's own styling
    (``top``), which is given escaped plain text only."""
    wrapped = sys.stdout
    if isinstance(wrapped, SafeStream) and wrapped.isatty():
        sys.stdout = wrapped.raw
        try:
            yield
        finally:
            sys.stdout = wrapped
    else:
        yield
