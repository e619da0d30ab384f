"""What importing a framework callback does before the framework's process group.

The Hugging Face Trainer (``TrainingArguments``, through accelerate's
``PartialState``) and Lightning (``trainer.fit``, in the strategy's set-up)
call ``init_process_group`` before any callback of ours exists, so the hook a
callback makes can neither prefix torchrun's store nor see the start-up. The
earliest place trainprobe runs in such a script is the import of
``trainprobe.hooks.lightning`` or ``trainprobe.hooks.transformers`` at its top,
before the Trainer is built: :func:`prepare`, called there, does both.

- Under a restarted torchrun attempt it prefixes the process group's store by
  the attempt (:func:`~trainprobe.hooks.startup.restart_store.install_restart_prefix`):
  torch reads its handler table when ``init_process_group`` runs, so this is
  in time, and without it a restarted attempt often fails in or hangs on
  ``init_process_group`` ("Gloo connectFullMesh failed ... Connection
  refused").
- Under torchrun (``TORCHELASTIC_RUN_ID``, ``RANK``, ``WORLD_SIZE`` > 1) and
  before a process group exists, it makes a start-up hook: a
  :class:`~trainprobe.hooks.LivenessProbeHook` from the environment alone
  (``TRAINPROBE_TARGET``, ``TRAINPROBE_JOB_ID``, ``TRAINPROBE_TOKEN``) whose
  phases ``init`` and ``rendezvous`` the sidecar judges as for a hook made
  first thing in a plain script, on every attempt, so a restarted attempt
  that hangs in its start-up is named and killed like any other hang. Once
  the process group exists it ends with a clean Goodbye, at once (the
  framework's own set-up after that is not judged, as before); the
  callback's hook, made later with the callback's arguments, ends it first
  if it is still there. ``TRAINPROBE_STARTUP_WATCH=0`` turns it off.

Outside torchrun (a plain launch, Lightning's own launcher, Ray Train, whose
process group exists before the training function runs) both do nothing.
Nothing here raises.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading

from trainprobe.hooks.liveness import Collector, LivenessProbeHook
from trainprobe.hooks.startup.phases import process_group_ready
from trainprobe.hooks.startup.restart_store import install_restart_prefix
from trainprobe.proto import probe_pb2

__all__ = ["WATCH_ENV", "end_startup_watch", "prepare"]

log = logging.getLogger("trainprobe.hooks")

WATCH_ENV = "TRAINPROBE_STARTUP_WATCH"

_lock = threading.Lock()
_watch: LivenessProbeHook | None = None


def _under_torchrun() -> bool:
    """A rank torchrun started: not a process it started in turn (a DataLoader
    worker of the spawn method imports the script again, with the same
    environment, and must not report as the rank)."""
    env = os.environ
    try:
        ranks = bool(env.get("TORCHELASTIC_RUN_ID")) and int(env.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False
    # While a spawned child imports the script, its parent_process() is not
    # set yet, but it already has its own name.
    child = multiprocessing.parent_process() is not None
    return ranks and not child and multiprocessing.current_process().name == "MainProcess"


def prepare() -> None:
    """The store prefix and the start-up hook; called once, at the callback module's import."""
    global _watch
    try:
        import torch.distributed  # noqa: F401  (the framework needs it anyway)

        install_restart_prefix()
        if (
            os.environ.get(WATCH_ENV, "1") == "0"
            or "RANK" not in os.environ
            or not _under_torchrun()
            or process_group_ready()
        ):
            return
        with _lock:
            if _watch is not None:
                return
            hook = LivenessProbeHook()
            if hook.startup is None:  # a world of one after all: nothing to watch
                hook.close()
                return
            hook.add_collector(_end_when_ready(hook))
            _watch = hook
    except Exception:
        log.warning("trainprobe: no start-up watch before the process group", exc_info=True)


def _end_when_ready(hook: LivenessProbeHook) -> Collector:
    ended = threading.Event()

    def collect(report: probe_pb2.Report) -> None:
        # Runs in the reporter thread right after the start-up poll; the
        # Goodbye waits for that thread, so another one sends it.
        startup = hook.startup
        if startup is not None and not startup.open and not ended.is_set():
            ended.set()
            threading.Thread(
                target=end_startup_watch, name="trainprobe-startup-end", daemon=True
            ).start()

    return collect


def end_startup_watch() -> None:
    """End the start-up hook with a clean Goodbye, if there is one (callbacks call it
    before making their own hook: one hook a process). Never raises."""
    global _watch
    try:
        with _lock:
            hook, _watch = _watch, None
            if hook is not None:
                hook.close()
    except Exception:
        log.debug("trainprobe: ending the start-up watch failed", exc_info=True)
