"""A plain ``init_process_group`` that survives torchrun's restarts.

torchrun's agent serves one TCPStore for every attempt of a job (the
rendezvous store it shares with the workers, ``TORCHELASTIC_USE_AGENT_STORE``),
and torch's env:// handler connects to it without any per-attempt prefix:
``torch/distributed/rendezvous.py`` says "We create a new TCPStore for every
retry so no need to add prefix for each attempt", but the dynamic rendezvous
keeps its shared store server across rounds. A restarted rank then reads its
dead peer's gloo address, left in the store by the attempt before, and
``init_process_group`` hangs until the process group's timeout, then fails
("Gloo connectFullMesh failed ... Connection refused"): 9 of 15 restarts
without this, 0 of 15 with it (bench/probes/bench_startup.py).

:func:`install_restart_prefix` wraps the env:// handler so that, from the
first restart on, the store it returns is prefixed by the attempt
(``TORCHELASTIC_RESTART_COUNT``). Every rank of an attempt runs the same
script, so all of them use the same prefix; attempt 0 is left as torch makes
it. The hook calls it when it is made before the process group;
``TRAINPROBE_RESTART_PREFIX=0`` turns it off.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["PREFIX_ENV", "install_restart_prefix"]

log = logging.getLogger("trainprobe.hooks")

PREFIX_ENV = "TRAINPROBE_RESTART_PREFIX"
_MARK = "_trainprobe_restart_prefix"


def _attempt() -> int:
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def install_restart_prefix() -> bool:
    """Prefix the env:// store by the torchrun attempt; True if it now is.

    Does nothing (False) outside a restarted torchrun attempt that shares the
    agent's store, when torch is not imported yet (the hook never imports it),
    or when turned off by ``TRAINPROBE_RESTART_PREFIX=0``. Never raises.
    """
    attempt = _attempt()
    if (
        attempt < 1
        or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
        or os.environ.get(PREFIX_ENV, "1") == "0"
        or "torch" not in sys.modules
    ):
        return False
    try:
        import importlib

        import torch.distributed as dist

        # The module: torch.distributed.rendezvous the attribute is a function.
        rdzv = importlib.import_module("torch.distributed.rendezvous")

        handlers: dict[str, Callable[..., Iterator[Any]]] = rdzv._rendezvous_handlers
        stock = handlers.get("env")
        if stock is None:
            return False
        if getattr(stock, _MARK, False):
            return True
        prefix = f"trainprobe/attempt-{attempt}/"

        def env_handler(url: str, **kwargs: Any) -> Iterator[Any]:
            store, rank, world_size = next(iter(stock(url, **kwargs)))
            if not isinstance(store, dist.PrefixStore):  # torch may fix it one day
                store = dist.PrefixStore(prefix, store)
            yield store, rank, world_size
            raise RuntimeError("Unable to perform re-rendezvous using env:// method")

        setattr(env_handler, _MARK, True)
        handlers["env"] = env_handler
    except Exception:
        log.warning("trainprobe: could not prefix the torchrun store by attempt", exc_info=True)
        return False
    log.info("trainprobe: torchrun attempt %d: process-group store prefixed %r", attempt, prefix)
    return True
