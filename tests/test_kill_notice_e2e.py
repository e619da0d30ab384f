"""The survivors' errors name the kill (issue 12, item 7).

Real sidecar, real gloo ranks: rank 1 hangs, trainprobe kills it, and the
surviving ranks fail in their next collective. Each survivor must log one
line (from its reporter thread) naming the killed rank, the reason and the
incident id, and its failing collective's error must carry the same line, so
that the traceback through trainprobe's comm hook does not read as our fault.
(``hook.collective()``'s note: tests/unit/test_notices.py.)
"""

from __future__ import annotations

import pytest

from tests.support import Workers, short_tmpdir, sidecar, wait_for

pytestmark = pytest.mark.slow

ARGS = ["--steps", "400", "--step-s", "0.02", "--interval-ms", "100"]


def test_survivors_log_and_their_errors_name_the_kill() -> None:
    """Rank 1 of 3 sleeps in its step; ranks 0 and 2 wait in DDP's allreduce,
    through trainprobe's comm hook (watch_ddp), and fail once rank 1 is killed."""
    job = "notice"
    args = [*ARGS, "--watch-ddp", "--hang-rank", "1", "--hang-at", "15", "--hang-how", "sleep"]
    with (
        sidecar("--sync-timeout-s", "2", "--stall-timeout-s", "4") as sc,
        Workers(3, sc.target, short_tmpdir(), job_id=job, args=args) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == job, timeout_s=240)
        assert inc["targets"] == [1], inc
        exits = w.wait(120)
        assert exits[1] is not None and exits[1] != 0
        for rank in (0, 2):
            # Survivors fail (their peer is gone) and exit non-zero.
            wait_for(lambda r=rank: w.procs[r].poll() is not None, 120, what=f"rank {rank} exit")
            text = w.log_text(rank)
            line = f"trainprobe killed rank 1 of job {job}: HUNG ({inc['rule']})"
            logged = [ln for ln in text.splitlines() if line in ln and "collectives with" in ln]
            assert len(logged) == 1, text
            assert f"[incident {inc['id']}]" in logged[0]
            # The error itself carries the note, not only the log line.
            noted = [ln for ln in text.splitlines() if "this error follows from that kill" in ln]
            assert noted and f"incident {inc['id']}" in noted[0], text
