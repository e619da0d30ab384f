"""Runs a training script with timestamps of its start-up, for restart_breakdown.py.

    python _restart_timing.py SCRIPT ARGS...   (as torchrun's entry point)

Appends JSON lines to ``$TP_TIMING``: ``exec`` (the process's creation, from
/proc), ``torch_imported``, ``pg_enter``/``pg_exit`` (init_process_group,
however the framework calls it), ``tp_import`` (the first import of
trainprobe, with its start ``t0``), ``uncaught`` (an exception ending the
script) and ``atexit``. Nothing else in the script changes: it runs as
``__main__``.
"""

from __future__ import annotations

import atexit
import builtins
import json
import os
import runpy
import sys
import time
from typing import Any

PATH = os.environ["TP_TIMING"]
RANK = int(os.environ.get("RANK", "-1"))
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def event(name: str, t: float | None = None, **fields: Any) -> None:
    row = {"t": t or time.time(), "ev": name, "pid": os.getpid(), "rank": RANK}
    with open(PATH, "a") as fh:
        fh.write(json.dumps({**row, "attempt": ATTEMPT, **fields}) + "\n")


def _created_at() -> float:
    """This process's creation, on the wall clock (clock ticks since boot, from /proc)."""
    with open("/proc/self/stat") as fh:
        ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - since_boot


def _time_trainprobe_import() -> None:
    original = builtins.__import__
    depth = [0]

    def timed(name: str, *args: Any, **kwargs: Any) -> Any:
        if not name.startswith("trainprobe") or depth[0]:
            return original(name, *args, **kwargs)
        depth[0] += 1
        t0 = time.time()
        try:
            return original(name, *args, **kwargs)
        finally:
            depth[0] -= 1
            event("tp_import", t0=t0, module=name)

    builtins.__import__ = timed


def main() -> None:
    event("exec", t=_created_at())
    import torch.distributed as dist

    event("torch_imported")
    original = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        event("pg_enter")
        try:
            return original(*args, **kwargs)
        finally:
            event("pg_exit")

    dist.init_process_group = init_process_group
    _time_trainprobe_import()
    atexit.register(event, "atexit")
    hook = sys.excepthook

    def uncaught(*exc: Any) -> None:
        event("uncaught", what=repr(exc[1])[:160])
        hook(*exc)

    sys.excepthook = uncaught
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
