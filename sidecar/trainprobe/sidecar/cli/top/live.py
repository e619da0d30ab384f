"""``trainprobe top``'s live loop: fetch, render, and read a key, until ``q``.

:func:`fetcher` asks a sidecar for its status and each job's diagnosis;
:func:`run` keeps :class:`~trainprobe.sidecar.cli.top.model.TopModel` up to
date from it and redraws the frame :func:`~trainprobe.sidecar.cli.top.view.render`
makes, reading single key presses from the terminal in between.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import Console, Group
from rich.live import Live

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.cli.top.model import TopModel
from trainprobe.sidecar.cli.top.view import render
from trainprobe.sidecar.core.text import printable

__all__ = ["Fetch", "fetcher", "run"]

Fetch = Callable[[], tuple[probe_pb2.StatusReply, dict[str, dict]]]


def fetcher(stub: object, metadata: tuple, job: str, timeout_s: float) -> Fetch:
    """Status, then a diagnosis of each job in it, over ``stub``."""

    def fetch() -> tuple[probe_pb2.StatusReply, dict[str, dict]]:
        reply = stub.GetStatus(  # type: ignore[attr-defined]
            probe_pb2.StatusRequest(job_id=job), timeout=timeout_s, metadata=metadata
        )
        diagnoses = {}
        for j in sorted({w.job_id for w in reply.workers}):
            with contextlib.suppress(Exception):  # a job can end between the two calls
                d = stub.Diagnose(  # type: ignore[attr-defined]
                    probe_pb2.DiagnoseRequest(job_id=j), timeout=timeout_s, metadata=metadata
                )
                diagnoses[j] = json.loads(d.json)
        return reply, diagnoses

    return fetch


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str]]:
    """Single key presses from a terminal, without waiting for Enter."""
    if not sys.stdin.isatty():

        def no_key(timeout: float) -> str:
            time.sleep(timeout)
            return ""

        yield no_key
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 1).decode(errors="replace") if ready else ""

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run(fetch: Fetch, interval_s: float, by: str, once: bool = False, job: str = "") -> int:
    """Refresh every ``interval_s`` until ``q`` (or one frame with ``once``)."""
    model = TopModel()
    console = Console()
    if once:
        model.update(*fetch(), time.monotonic())
        console.print(render(model, by, width=console.width))
        if job and not model.rows:
            # As status does: a script asking for one job must not read an empty
            # frame as that job being healthy (the live view waits for it instead).
            print(
                f"trainprobe: no worker of job {printable(job)} is known to this sidecar "
                "(trainprobe status, without --job, lists the jobs it has)",
                file=sys.stderr,
            )
            return 1
        return 0
    with _keys() as key, Live(console=console, auto_refresh=False, screen=False) as live:
        while True:
            model.update(*fetch(), time.monotonic())
            live.update(_frame(model, by, console), refresh=True)
            deadline = time.monotonic() + interval_s
            while (left := deadline - time.monotonic()) > 0:
                k = key(left).lower()
                if k == "q":
                    return 0
                if k in ("l", "s"):
                    by = "lag" if k == "l" else "step"
                    live.update(_frame(model, by, console), refresh=True)


def _frame(model: TopModel, by: str, console: Console) -> Group:
    width, height = console.size
    return render(model, by, width=width, height=height)
