"""Phases that a training framework opens and closes in two separate callbacks.

Lightning's and Hugging Face's callbacks see an evaluation or a save begin in
one callback and end in another, so no ``with hook.phase(...)`` can span it:
both callbacks keep their open phases here. A framework call with no callback
around it (a save, a collective each step begins with) is wrapped instead
(:func:`within`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from trainprobe.hooks.liveness import LivenessProbeHook

F = TypeVar("F", bound=Callable[..., Any])
#: What a wrapped call runs within: a phase or a collective of the hook.
Scope = Callable[[LivenessProbeHook], contextlib.AbstractContextManager[Any]]


class _HasHook(Protocol):
    hook: LivenessProbeHook | None


def within(
    callback: _HasHook,
    original: F,
    scope: Scope,
) -> F:
    """``original``, run inside ``scope(hook)`` (a phase, a collective) while
    ``callback`` has a hook, and as it is once the callback closed it."""

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        hook = callback.hook
        if hook is None:
            return original(*args, **kwargs)
        with scope(hook):
            return original(*args, **kwargs)

    return wrapped  # type: ignore[return-value]


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
