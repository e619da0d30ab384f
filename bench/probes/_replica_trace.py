"""Run a replicated training script with timestamps of its way to the first step.

    TRAINPROBE_TRACE=trace.jsonl python bench/probes/_replica_trace.py SCRIPT ARGS...

Appends one JSON line per mark (``t``, ``pid``, ``mark``) to ``$TRAINPROBE_TRACE``:
the interpreter up, torch and trainprobe imported, the torchft Manager made,
each of the first quorum's parts (the lighthouse's answer, the transport's
configure, the state fetched from a peer) and the first commit. Wraps torchft's
Manager from outside, so the script runs unchanged. For replicated_breakdown.py.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from typing import Any

__all__: list[str] = []

_TRACE = os.environ.get("TRAINPROBE_TRACE", "")


def mark(what: str) -> None:
    if _TRACE:
        with open(_TRACE, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "pid": os.getpid(), "mark": what}) + "\n")


def _timed(obj: Any, name: str, label: str, once: list[str]) -> None:
    """Mark the start and the end of the first call of ``obj.name``."""
    inner = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        first = label not in once
        once.append(label)
        if first:
            mark(f"{label} start")
        try:
            return inner(*args, **kwargs)
        finally:
            if first:
                mark(f"{label} end")

    setattr(obj, name, wrapper)


class _Client:
    """torchft's ManagerClient (a Rust object: its methods cannot be set) with a timed _quorum."""

    def __init__(self, inner: Any, once: list[str]) -> None:
        self._inner = inner
        _timed(self, "_quorum_inner", "lighthouse quorum", once)

    def _quorum_inner(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner._quorum(*args, **kwargs)

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        return self._quorum_inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def main() -> None:
    mark("python up")
    import torch  # noqa: F401

    mark("torch imported")
    import torchft

    import trainprobe.hooks

    mark("trainprobe imported")
    once: list[str] = []
    init = torchft.Manager.__init__

    def manager_init(self: Any, *args: Any, **kwargs: Any) -> None:
        mark("manager start")
        init(self, *args, **kwargs)
        mark("manager made")
        self._client = _Client(self._client, once)
        _timed(self._pg, "configure", "transport configure", once)
        _timed(self._checkpoint_transport, "recv_checkpoint", "state fetch", once)

    torchft.Manager.__init__ = manager_init
    import torch.distributed as dist
    from torch import nn

    import trainprobe.hooks.replica.replicate as replicated

    _timed(trainprobe.hooks.LivenessProbeHook, "__init__", "hook", once)
    _timed(dist, "init_process_group", "process group", once)
    _timed(nn.parallel.DistributedDataParallel, "__init__", "DDP init", once)
    _timed(replicated, "make_manager", "make_manager", once)
    _timed(torchft, "ProcessGroupGloo", "torchft gloo", once)
    commit = torchft.Manager.should_commit

    def should_commit(self: Any, *args: Any, **kwargs: Any) -> bool:
        ok = bool(commit(self, *args, **kwargs))
        if ok and "commit" not in once:
            once.append("commit")
            mark("first commit")
        return ok

    torchft.Manager.should_commit = should_commit
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
