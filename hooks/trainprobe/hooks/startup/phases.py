"""Start-up as phases: the hook made before ``init_process_group`` reports it.

A hook made before the process group exists (its identity comes from the
environment: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``...)
opens the phase ``init`` at once, and the reporter thread, once a report,
looks at where the training thread is:

- inside ``torch.distributed`` (``init_process_group``, the env:// store's
  connect, the backend's key exchange): the rank has *arrived*, and the
  phase ``rendezvous`` opens beside ``init``;
- a process group exists, or a step has ended: both phases close.

So the sidecar can tell the rank that has not arrived from the peers that
wait for it in the rendezvous. The look costs one ``sys._current_frames()``
a report, and only until the process group exists. Everything here runs in
the reporter thread and never raises.
"""

from __future__ import annotations

import logging
import os
import sys
from types import FrameType

from trainprobe.hooks.watch.steps import PhaseTracker, StepRing
from trainprobe.proto.wire import INIT_PHASE, RENDEZVOUS_PHASE

__all__ = ["INIT_PHASE", "RENDEZVOUS_PHASE", "StartupPhases", "process_group_ready"]

log = logging.getLogger("trainprobe.hooks")

_TORCH_DIST = f"{os.sep}torch{os.sep}distributed{os.sep}"
#: Deepest frames looked at: init_process_group sits a few frames below the script.
_MAX_DEPTH = 64


def process_group_ready() -> bool:
    """Whether ``torch.distributed`` has a default process group (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return False
    try:
        return bool(dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _in_torch_distributed(frame: FrameType | None) -> bool:
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        if _TORCH_DIST in frame.f_code.co_filename:
            return True
        frame, depth = frame.f_back, depth + 1
    return False


class StartupPhases:
    """The ``init`` and ``rendezvous`` phases of one hook."""

    def __init__(self, phases: PhaseTracker, ring: StepRing, thread_id: int) -> None:
        self._phases, self._ring, self._thread_id = phases, ring, thread_id
        self._init = phases.enter(INIT_PHASE, 0.0)
        self._rendezvous = 0

    @property
    def open(self) -> bool:
        return self._init != 0

    def poll(self) -> None:
        """Close or open the phases from what the training thread is doing now."""
        if not self._init:
            return
        try:
            if self._ring.n or process_group_ready():
                self.close()
                return
            frame = sys._current_frames().get(self._thread_id)
            arrived = _in_torch_distributed(frame)
            del frame
        except Exception:  # never into the reporter thread's loop
            log.debug("trainprobe: start-up poll failed", exc_info=True)
            return
        if arrived and not self._rendezvous:
            self._rendezvous = self._phases.enter(RENDEZVOUS_PHASE, 0.0)
        elif not arrived and self._rendezvous:
            self._phases.exit(self._rendezvous)
            self._rendezvous = 0

    def close(self) -> None:
        if self._rendezvous:
            self._phases.exit(self._rendezvous)
            self._rendezvous = 0
        if self._init:
            self._phases.exit(self._init)
            self._init = 0
