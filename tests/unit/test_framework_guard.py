"""A framework callback's failure never reaches the framework: hooks/framework/guard.py."""

from __future__ import annotations

import logging

import pytest

from trainprobe.hooks.framework.guard import guarded


class Callback:
    def __init__(self) -> None:
        self._warned = False

    @guarded(keep_result=True)
    def lightning_style(self, fail: bool) -> str:
        if fail:
            raise RuntimeError("boom")
        return "result"

    @guarded(keep_result=False)
    def trainer_style(self) -> str:
        return "a control the Trainer would take for its own"


def test_a_failure_is_a_warning_once_then_debug_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cb = Callback()
    with caplog.at_level(logging.DEBUG, logger="trainprobe.hooks"):
        assert cb.lightning_style(True) is None
        assert cb.lightning_style(True) is None
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.WARNING, logging.DEBUG], levels
    assert "lightning_style failed; training goes on" in caplog.records[0].getMessage()
    assert caplog.records[0].exc_info is not None  # the traceback, once


def test_a_result_is_kept_only_where_the_framework_wants_it() -> None:
    cb = Callback()
    assert cb.lightning_style(False) == "result"
    assert cb.trainer_style() is None  # a Hugging Face callback never replaces the control
