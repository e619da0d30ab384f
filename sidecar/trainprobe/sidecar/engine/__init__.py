"""The judging loop: each tick runs the rules over the registry, turns
findings into incidents and decisions, and hands them to actions and
exporters (:mod:`.loop`); a hang takes the hang path: one diagnosed
episode per job, culprit first (:mod:`.hangs`).

Public API: :class:`Engine`, :class:`HangResponder`.
"""

from trainprobe.sidecar.engine.hangs import HangResponder
from trainprobe.sidecar.engine.loop import Engine

__all__ = ["Engine", "HangResponder"]
