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
  that hangs in its start-up is named and killed like any other hang.
- It keeps that hook past the process group, until the callback's hook takes
  over (the callback's or any other ``LivenessProbeHook`` made in the process
  ends it first: one hook a process). That window is the framework's own
  set-up: Lightning's ``prepare_data``, the Hugging Face Trainer's
  construction and, after a restart, the checkpoint's load. Once one of our
  callbacks exists, the hook watches DDP's construction (which the HF Trainer
  runs before ``on_train_begin``, once every rank's set-up is done), as the
  callback watches the framework's collectives later, so a rank that hangs in
  that window while its peers wait there is named in seconds
  (rule ``startup_straggler``), and the rank named is the hung one. A barrier
  there is no evidence (rank 0 downloads or tokenizes first while the others
  wait, as long as that takes), and Lightning's ``prepare_data`` is a phase of
  the hook, judged by ``phase_timeout_s``. Its Hello
  says ``startup_watch``: the script need not use the callback, so the
  session may never step, and the sidecar does not judge it by the
  no-first-step timeout (rule ``startup``), only on evidence.
  ``TRAINPROBE_STARTUP_WATCH=0`` turns it off.

Outside torchrun (a plain launch, Lightning's own launcher, Ray Train, whose
process group exists before the training function runs) both do nothing.
Nothing here raises.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
from typing import Any

from trainprobe.hooks.framework.phases import Scope, within
from trainprobe.hooks.liveness import LivenessProbeHook, _before_new_hook
from trainprobe.hooks.startup.phases import process_group_ready
from trainprobe.hooks.startup.restart_store import install_restart_prefix

__all__ = ["WATCH_ENV", "Patch", "callback_made", "end_startup_watch", "prepare"]

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


class _StartupHook(LivenessProbeHook):
    startup_watch = True


class _Watching:
    """What the patched collectives report to: the start-up hook, once a
    callback of ours exists (a script that only imports the module is watched
    for hangs, but its own collectives are no one's evidence), else None."""

    hook: LivenessProbeHook | None = None


_watching = _Watching()
#: (owner, name, original, wrapper) of each function patched.
_patched: list[tuple[Any, str, Any, Any]] = []

#: A framework's own call of its set-up: (class or module, attribute, scope).
Patch = tuple[Any, str, Scope]


def prepare(framework_calls: tuple[Patch, ...] = ()) -> None:
    """The store prefix and the start-up hook; called once, at the callback module's
    import, with the framework's own calls of its set-up to watch as well."""
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
            hook = _StartupHook()
            if hook.startup is None:  # a world of one after all: nothing to watch
                hook.close()
                return
            _watch = hook
            _before_new_hook.append(end_startup_watch)
            _patch_set_up(framework_calls)
    except Exception:
        log.warning("trainprobe: no start-up watch before the process group", exc_info=True)


def _patch_set_up(framework_calls: tuple[Patch, ...]) -> None:
    """Watch DDP's construction, and the framework's own calls it names, while
    the start-up hook lives.

    DDP's constructor checks the parameters' shapes and broadcasts rank 0's
    state, and every rank reaches it only once its set-up is done (the HF
    Trainer wraps the model before ``on_train_begin``, after a checkpoint's
    load): a peer waiting there is evidence against a rank that never comes.
    torch.distributed's barriers and broadcasts are not watched: a framework's
    "main process first" (rank 0 downloads or tokenizes, for as long as it
    takes, while the others wait in a barrier) looks the same as a hang there,
    and would make a healthy slow start a straggler to kill.
    """
    from torch.nn.parallel import DistributedDataParallel

    patches: list[Patch] = [(DistributedDataParallel, "__init__", _collective("broadcast"))]
    patches += framework_calls
    for owner, name, scope in patches:
        original = vars(owner).get(name)
        if callable(original):
            wrapped = within(_watching, original, scope)
            setattr(owner, name, wrapped)
            _patched.append((owner, name, original, wrapped))


def _collective(name: str) -> Scope:
    return lambda hook: hook.collective(name)


def callback_made() -> None:
    """A callback of ours exists: the start-up hook watches the collectives from now on."""
    with _lock:
        _watching.hook = _watch


def end_startup_watch() -> None:
    """End the start-up hook with a clean Goodbye, if there is one, and undo its
    patches (callbacks call it before making their own hook, and so does any
    new :class:`~trainprobe.hooks.LivenessProbeHook`: one hook a process).
    Never raises."""
    global _watch
    try:
        with _lock:
            hook, _watch = _watch, None
            _watching.hook = None
            if hook is None:
                return
            with contextlib.suppress(ValueError):
                _before_new_hook.remove(end_startup_watch)
            _unpatch_collectives()
            hook.close()
    except Exception:
        log.debug("trainprobe: ending the start-up watch failed", exc_info=True)


def _unpatch_collectives() -> None:
    for owner, name, original, wrapped in _patched:
        if vars(owner).get(name) is wrapped:  # not if someone patched it after us
            setattr(owner, name, original)
    _patched.clear()
