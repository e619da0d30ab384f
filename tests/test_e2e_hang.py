"""End to end: real sidecar process, real gloo ranks, real hangs, real signals."""

from __future__ import annotations

import pytest

from tests.support import Workers, short_tmpdir, sidecar, wait_for

pytestmark = pytest.mark.slow


def test_rank_sleeping_in_step_is_detected_and_killed() -> None:
    """Rank 2 sleeps inside a step; ranks 0, 1, 3 block in the allreduce."""
    with (
        sidecar("--stall-timeout-s", "3") as sc,
        Workers(
            4,
            sc.target,
            short_tmpdir(),
            job_id="hang4",
            args=["--steps", "400", "--step-s", "0.02", "--hang-rank", "2", "--hang-at", "15"],
        ) as w,
    ):
        inc = sc.wait_incident(lambda r: r["rule"] == "stall", timeout_s=60)
        assert inc["verdict"] == "HUNG"
        assert inc["job_id"] == "hang4"
        assert 2 in inc["ranks"]
        assert inc["evidence"]["2"]["step_age_s"] >= 3.0
        # Detection must come within the stall timeout plus a few ticks.
        assert 3.0 <= inc["detection_latency_s"] < 3.0 + 0.5
        actions = wait_for(lambda: sc.incidents("action"), 30, what="action record")
        assert actions[0]["incident_id"] == inc["id"]
        codes = w.wait(30)
        killed = [w.pids[r] for r in inc["targets"]]
        assert all(codes[w.pids.index(pid)] is not None for pid in killed)
        assert w.max_step() < 400
