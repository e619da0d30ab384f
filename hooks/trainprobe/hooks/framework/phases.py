"""Phases that a training framework opens and closes in two separate callbacks.

Lightning's and Hugging Face's callbacks see an evaluation or a save begin in
one callback and end in another, so no ``with hook.phase(...)`` can span it:
both callbacks keep their open phases here.
"""

from __future__ import annotations

import contextlib
from typing import Any

from trainprobe.hooks.liveness import LivenessProbeHook


class OpenPhases:
    """The phases open now, by name; each is entered once and exited once."""

    def __init__(self) -> None:
        self._open: dict[str, contextlib.AbstractContextManager[Any]] = {}

    def open(self, hook: LivenessProbeHook | None, name: str) -> None:
        if hook is None or name in self._open:
            return
        phase = hook.phase(name)
        phase.__enter__()
        self._open[name] = phase

    def close(self, name: str) -> None:
        phase = self._open.pop(name, None)
        if phase is not None:
            phase.__exit__(None, None, None)

    def close_all(self) -> None:
        for name in list(self._open):
            self.close(name)

    def __contains__(self, name: object) -> bool:
        return name in self._open

    def __bool__(self) -> bool:
        return bool(self._open)
