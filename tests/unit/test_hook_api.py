"""LivenessProbeHook's API contract, in process (no sidecar needed)."""

from __future__ import annotations

import logging

import pytest

from trainprobe.hooks import LivenessProbeHook, resolve_target
from trainprobe.proto import default_socket_path


def test_bad_interval_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"interval_ms must be an integer in 10\.\.60000"):
        LivenessProbeHook(interval_ms=5, start=False)


def test_on_step_end_and_phase_never_raise_on_odd_input() -> None:
    hook = LivenessProbeHook(target="unix:///tmp/none.sock", start=False, rank=0, world_size=1)
    for step in (None, 3, "seven", object(), -1, 2**70):
        hook.on_step_end(step)  # type: ignore[arg-type]
    with hook.phase("ckpt", timeout_s="soon"):  # type: ignore[arg-type]
        pass
    with hook.phase("eval", timeout_s=float("nan")):
        pass
    report = hook._make_report()
    assert report.total_steps == 6 and report.last_step == 6  # 2**70 is not wire-safe
    assert [p.name for p in report.finished_phases] == ["ckpt", "eval"]
    assert all(p.timeout_s == 0 for p in report.finished_phases)
    hook.on_step_end(-1)
    assert hook._make_report().last_step == 7  # negative steps fall back to the count
    hook.close()


def test_target_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINPROBE_TARGET", raising=False)
    assert resolve_target(None) == f"unix://{default_socket_path()}"
    monkeypatch.setenv("TRAINPROBE_TARGET", "127.0.0.1:7000")
    assert resolve_target(None) == "127.0.0.1:7000"
    assert resolve_target("unix:///run/x.sock") == "unix:///run/x.sock"
    monkeypatch.setenv("TRAINPROBE_TARGET", "nonsense")
    with pytest.raises(ValueError, match="expected unix"):
        resolve_target(None)  # the function says why; the hook never raises (below)


BAD_TARGETS = [
    "nonsense",
    "   ",
    "unix://relative/x.sock",
    "http://127.0.0.1:80",
    "127.0.0.1:99999",
    "127.0.0.1:port",
    "unix:///" + "x" * 200,
]
#: (how the target is given, the target); a NUL byte cannot be put in the environment.
CASES = [(via, bad) for via in ("env", "argument") for bad in BAD_TARGETS]
CASES.append(("argument", "unix:///tmp/a\x00b.sock"))


@pytest.mark.parametrize(("via", "bad"), CASES)
def test_a_bad_target_makes_an_inert_hook_and_one_warning(
    bad: str, via: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRAINPROBE_TARGET", bad if via == "env" else "")
    with caplog.at_level(logging.WARNING, logger="trainprobe.hooks"):
        hook = LivenessProbeHook(target=bad if via == "argument" else None, rank=0, world_size=2)
        hook.on_step_end(1)
        with hook.phase("checkpoint"):
            hook.on_step_end(2)
        assert not hook.connected and hook.target == ""
        hook.close()
    warned = [r for r in caplog.records if "bad sidecar address" in r.getMessage()]
    assert len(warned) == 1, caplog.text
    assert "NOT monitored" in warned[0].getMessage()


def test_a_second_live_hook_in_one_process_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = LivenessProbeHook(target="unix:///tmp/none.sock", start=False, rank=0, world_size=1)
    with caplog.at_level(logging.WARNING, logger="trainprobe.hooks"):
        second = LivenessProbeHook(
            target="unix:///tmp/none.sock", start=False, rank=0, world_size=1
        )
    assert "another LivenessProbeHook is already active" in caplog.text
    first.close()
    second.close()
