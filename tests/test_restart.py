"""A sidecar killed -9 and restarted (issue 13, row 10; docs/SECURITY.md, "Restarts").

Real gloo ranks with the real hook, a real SIGKILL of the sidecar process, and
a real hang that begins while it is down. The goals are 1 s to reconnect and
threshold + 2 s to kill; the assertions allow a loaded 2-core CI machine
twice that (each still fails on the 5 s backoff cap this guards against:
before the fix, hooks came back 5.7-6.2 s after the restart). The figures
measured are printed for docs/SECURITY.md.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.support import SidecarProcess, Workers, short_tmpdir, wait_for

STALL_S = 3.0


#: The kill at the verdict: measures detection and the kill across a restart,
#: not the patience an ambiguous hang (a sleep) gets by default.
AT_THE_VERDICT = (
    *("--stall-timeout-s", str(STALL_S), "--kill-grace-s", "1", "--tick-interval-ms", "50"),
    *("--hang-patience-s", "0"),
)


@pytest.mark.slow
@pytest.mark.parametrize("flags", [AT_THE_VERDICT, ()], ids=["kill_at_verdict", "shipped"])
def test_restarted_sidecar_has_its_hooks_back_fast_and_kills_a_hang_from_its_downtime(
    flags: tuple[str, ...],
) -> None:
    """Shipped defaults (auto stall threshold, 3 s floor): the verdict comes as fast,
    and the patience counts the downtime."""
    workdir = short_tmpdir()
    sc = SidecarProcess(workdir, *flags).start()
    hang_at = 60
    with Workers(
        2,
        sc.target,
        workdir,
        args=[
            "--steps",
            "100000",
            "--step-s",
            "0.05",
            "--hang-rank",
            "1",
            "--hang-at",
            str(hang_at),
            "--hang-how",
            "sleep",
            "--interval-ms",
            "100",
        ],
        job_id="restart",
    ) as w:
        try:
            wait_for(lambda: len(sc.status().workers) == 2, 60, what="both ranks")
            sc.stop(signal.SIGKILL)
            # The hang begins while the sidecar is down: rank 1 sleeps in step
            # hang_at and rank 0 waits for it in the gradient allreduce.
            wait_for(lambda: w.max_step(1) >= hang_at - 1, 60, what="the hang")
            hung_at = time.monotonic()
            time.sleep(6.0)
            assert w.max_step(1) <= hang_at and sc.proc.poll() is not None
            sc.start()
            restarted = time.monotonic()  # "ready" was seen (polled every 50 ms)
            rows = wait_for(
                lambda: (
                    [r for r in sc.status().workers if r.state == "connected"]
                    if len(sc.status().workers) == 2
                    else None
                ),
                10,
                interval_s=0.02,
                what="reconnect",
            )
            reconnected = time.monotonic() - restarted
            assert len(rows) == 2
            assert reconnected < 2.0, f"hooks back {reconnected:.2f} s after the restart"
            inc = sc.wait_incident(lambda r: r.get("rule") == "stall", 20)
            detected = time.monotonic() - restarted
            assert inc["verdict"] == "HUNG" and inc["diagnosis"]["culprits"] == [1]
            if not flags:
                # A sleep is ambiguous: named now, killed after the 90 s patience,
                # which counts from the hang's onset, downtime included.
                dec = inc["decision"]
                assert dec["act"] is False and dec["patience_s"] == 90.0, dec
                assert dec["stalled_s"] > 5.0, dec
                assert detected < 2 * (STALL_S + 2.0), f"HUNG {detected:.2f} s after the restart"
                assert w.procs[1].poll() is None
                print(f"\nshipped defaults: reconnect {reconnected:.3f} s, HUNG {detected:.3f} s")
                return
            wait_for(lambda: w.procs[1].poll() is not None, 20, interval_s=0.02, what="the kill")
            killed = time.monotonic() - restarted
            print(
                f"\nreconnect {reconnected:.3f} s, HUNG {detected:.3f} s, rank 1 dead "
                f"{killed:.3f} s after the restart; the hang began {restarted - hung_at:.1f} s "
                "before it"
            )
            assert inc["verdict"] == "HUNG" and inc["action"] in ("kill", "restart")
            # Goal: killed within threshold + 2 s of the restart (its threshold had
            # already passed while the sidecar was down).
            assert killed < STALL_S + 2.0, f"hung rank killed {killed:.2f} s after the restart"
        finally:
            sc.stop()
