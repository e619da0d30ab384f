"""A killed rank that comes back is reported as recovered, whoever restarts it.

Real sidecar process, real gloo worker processes, no Ray: a rank hangs, the
sidecar kills it, and a new process for the same job and rank (what
torchrun --max-restarts would start) reports steps again.
"""

from __future__ import annotations

import pytest

from tests.support import Workers, short_tmpdir, sidecar, wait_for

pytestmark = pytest.mark.slow


def test_replacement_of_a_killed_rank_is_logged_as_recovery() -> None:
    common = ["--step-s", "0.02", "--interval-ms", "100"]
    hangs = [*common, "--steps", "400", "--hang-rank", "0", "--hang-at", "10"]
    with sidecar("--stall-timeout-s", "2", "--kill-grace-s", "1", "--hang-patience-s", "0") as sc:
        workdir = short_tmpdir()
        with Workers(1, sc.target, workdir, job_id="rec", args=hangs) as first:
            inc = sc.wait_incident(lambda r: r["job_id"] == "rec", timeout_s=60)
            action = wait_for(lambda: sc.incidents("action"), 30, what="action record")[0]
            assert action["ok"] and action["incident_id"] == inc["id"]
            assert first.wait(30) != [None]
            old_pid = first.pids[0]
        assert sc.incidents("recovery") == []  # nobody came back yet
        with Workers(
            1, sc.target, workdir, job_id="rec", args=[*common, "--steps", "30"]
        ) as second:
            (rec,) = wait_for(lambda: sc.incidents("recovery"), 60, what="recovery record")
            assert rec["incident_id"] == inc["id"]
            assert (rec["job_id"], rec["rank"], rec["method"]) == ("rec", 0, "signal")
            assert (rec["old_pid"], rec["new_pid"]) == (old_pid, second.pids[0])
            assert rec["first_step"] == 1  # ddp_worker keeps no checkpoint
            assert 0 < rec["reconnected_after_s"] <= rec["resumed_after_s"]
            assert second.wait(60) == [0]
