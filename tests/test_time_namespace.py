"""Ranks in a time namespace of their own (``unshare --time``, as CRIU restores
a checkpointed container, or a runtime that gives each container its own
CLOCK_MONOTONIC): their monotonic clock is a day ahead of the sidecar's, in
the same PID namespace, verified by SO_PEERCRED like any local rank.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.otel_support import OtlpReceiver
from tests.support import Workers, short_tmpdir, sidecar, wait_for
from tests.test_otel_export import FAST_EXPORT

#: A day ahead, on both clocks a time namespace offsets.
AHEAD_S = 86_400
WRAP = ["unshare", "--time", "--monotonic", str(AHEAD_S), "--boottime", str(AHEAD_S)]
HANG = ["--steps", "400", "--step-s", "0.02", "--hang-rank", "1", "--hang-at", "10"]


def _time_namespaces() -> str:
    """Why time namespaces cannot be made here, or "" if they can."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run([*WRAP, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:  # needs CAP_SYS_ADMIN and Linux >= 5.6
        return f"unshare --time failed: {probe.stderr.strip()}"
    return ""


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_time_namespaces()), reason=_time_namespaces() or "ok"),
]


def test_a_healthy_job_in_a_time_namespace_is_healthy_and_a_hang_is_caught_on_time() -> None:
    with (
        OtlpReceiver() as rcv,
        sidecar(
            "--stall-timeout-s",
            "3",
            "--sync-timeout-s",
            "5",
            "--hang-patience-s",
            "0",
            "--otlp-endpoint",
            rcv.endpoint,
            "--trace-every-n-steps",
            "4",
            env=FAST_EXPORT,
        ) as sc,
    ):
        with Workers(
            2, sc.target, short_tmpdir(), job_id="timens-ok", args=["--steps", "60"], wrap=WRAP
        ) as ok:
            assert ok.wait(120) == [0, 0]
            progress = {(e["rank"], e["step"]): e["t"] for e in ok.events("step")}
        assert sc.incidents() == []
        # Step spans sit at the wall time the worker's steps ended, not a day off.
        steps = wait_for(
            lambda: [s for s in rcv.spans() if s.name == "step"], 15, what="step spans"
        )
        for s in steps:
            key = (s.attributes["trainprobe.rank"], s.attributes["trainprobe.step"])
            assert abs(s.end_ns / 1e9 - progress[key]) < 0.05, (key, s.end_ns / 1e9)

        with Workers(2, sc.target, short_tmpdir(), job_id="timens-hang", args=HANG, wrap=WRAP) as w:
            inc = sc.wait_incident(lambda r: r["job_id"] == "timens-hang", timeout_s=60)
            assert inc["rule"] == "stall" and 1 in inc["ranks"], inc
            # Judged on the sidecar's clock: the threshold plus a few ticks.
            assert 3.0 <= inc["detection_latency_s"] < 4.0, inc
            (action,) = wait_for(lambda: sc.incidents("action"), 30, what="action record")
            assert action["ok"] is True, action
            codes = w.wait(30)
            assert all(codes[r] is not None for r in inc["targets"]), codes
