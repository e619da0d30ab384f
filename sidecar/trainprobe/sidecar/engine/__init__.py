"""The judging loop: each tick runs the rules over the registry, steps the
hang machine (:func:`trainprobe.sidecar.core.hang.machine.step`) and applies the
effects it returns (:mod:`.runner`), through the protocols of :mod:`.ports`.

Public API: :class:`Engine`, :class:`EffectRunner`.
"""

from trainprobe.sidecar.engine.loop import Engine
from trainprobe.sidecar.engine.runner import EffectRunner

__all__ = ["EffectRunner", "Engine"]
