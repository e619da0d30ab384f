"""The judging loop: each tick runs the rules over the registry, turns
findings into incidents and decisions, and hands them to actions and
exporters (:mod:`.loop`); a hang takes the hang path: one diagnosed
episode per job, culprit first (:mod:`.hangs`), watched until the evidence
is definitive or the patience is spent (:mod:`.watch`), or found paused
(every live rank stopped or frozen: :mod:`.pause`), which is no hang.

Public API: :class:`Engine`, :class:`HangResponder`, :class:`HangWatch`.
"""

from trainprobe.sidecar.engine.hangs import HangResponder
from trainprobe.sidecar.engine.loop import Engine
from trainprobe.sidecar.engine.watch import HangWatch

__all__ = ["Engine", "HangResponder", "HangWatch"]
