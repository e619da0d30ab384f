"""How a framework callback fails: never into the framework's loop.

A callback's first failure is a warning with its traceback, later ones debug
lines, and training goes on: trainprobe watching a job must never be what
stops it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

__all__ = ["guarded", "report_failure"]

log = logging.getLogger("trainprobe.hooks")

F = TypeVar("F", bound=Callable[..., Any])


class _Callback(Protocol):
    #: Whether a failure was already logged as a warning.
    _warned: bool


def report_failure(callback: _Callback, where: str) -> None:
    """Log a callback's failure: a warning the first time, debug after."""
    level = logging.DEBUG if callback._warned else logging.WARNING
    callback._warned = True
    log.log(level, "trainprobe: %s failed; training goes on", where, exc_info=True)


def guarded(keep_result: bool) -> Callable[[F], F]:
    """A decorator for a callback's methods: an exception is logged
    (:func:`report_failure`) and the method returns None. ``keep_result``:
    otherwise the method's own result (Lightning); without it always None,
    which never replaces a Hugging Face Trainer's control."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(self: _Callback, *args: Any, **kwargs: Any) -> Any:
            try:
                result = fn(self, *args, **kwargs)
            except Exception:
                report_failure(self, fn.__name__)
                return None
            return result if keep_result else None

        return run  # type: ignore[return-value]

    return wrap
