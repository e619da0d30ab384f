"""The summary-mode simulation at a small size, as CI can run it.

bench/bench_summary_sync.py on a real upstream sidecar process with real
JobSync streams from simulated nodes (each running the node's own Uplink and
JobView): 40 nodes of 8 ranks, a job too large to send whole (320 ranks), so
the upstream judges it and pushes its verdict. Rank 0 stops: every node's view
must name it, and no healthy job may have had a culprit. The large sizes run
on the 16-core machine (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support import PYTHON, REPO, child_env, short_tmpdir


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_summary_mode_bench_names_the_culprit_at_a_small_size() -> None:
    out = short_tmpdir() / "summary.json"
    cmd = [PYTHON, str(REPO / "bench" / "bench_summary_sync.py"), "--nodes", "40", "--procs", "1"]
    cmd += ["--window-s", "2", "--settle-s", "12", "--incident", "--json", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=170)
    assert run.returncode == 0, run.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["connected"] == 40 and row["ranks"] == 320
    assert row["false_culprits"] == 0
    named = row["culprit_named_after_s"]
    assert named is not None and named <= 5.0, row
    assert row["incident_received_per_s"] > 0  # the verdict came down the streams
