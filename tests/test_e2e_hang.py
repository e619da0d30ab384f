"""End to end: real sidecar process, real gloo ranks, real hangs, real signals."""

from __future__ import annotations

import time

import pytest

from tests.support import Workers, short_tmpdir, sidecar, wait_for

pytestmark = pytest.mark.slow


def test_rank_sleeping_in_step_is_detected_and_killed() -> None:
    """Rank 2 sleeps inside a step; ranks 0, 1, 3 block in the allreduce (no watch_ddp)."""
    with (
        sidecar("--stall-timeout-s", "3", "--hang-patience-s", "0") as sc,
        Workers(
            4,
            sc.target,
            short_tmpdir(),
            job_id="hang4",
            args=["--steps", "400", "--step-s", "0.02", "--hang-rank", "2", "--hang-at", "15"],
        ) as w,
    ):
        inc = sc.wait_incident(lambda r: r["rule"] == "stall", timeout_s=180)
        assert inc["verdict"] == "HUNG"
        assert inc["job_id"] == "hang4"
        first = inc["ranks"][0]
        assert inc["evidence"][str(first)]["step_age_s"] >= 3.0
        # Detection must come within the stall timeout plus a few ticks.
        assert 3.0 <= inc["detection_latency_s"] < 3.0 + 0.5
        # Without watch_ddp every rank stops after the same step, but the stacks
        # tell them apart (issue 12; it was "inconclusive" and every rank was
        # killed): ranks 0, 1, 3 wait in DDP's backward, rank 2 is elsewhere.
        d = inc["diagnosis"]
        assert d["kind"] == "straggler" and d["culprits"] == [2], d
        assert inc["targets"] == [2]
        codes = w.wait(30)
        assert all(c is not None for c in codes)

        def killed() -> set[int]:
            return {int(r) for a in sc.incidents("action") for r in a.get("outcomes", {})}

        # Asleep outside any collective, rank 2 ends only by a kill; its peers end
        # by their collective's error, not by trainprobe (records land async).
        wait_for(lambda: 2 in killed(), 10, what="rank 2's kill record")
        assert killed() == {2}
        assert all(a["incident_id"] == inc["id"] for a in sc.incidents("action"))
        assert w.max_step() < 400


def test_sigstopped_rank_is_unresponsive_and_killed() -> None:
    """SIGSTOP freezes the reporter thread too: no reports. Its silence gets its
    /proc read (core/hang/stopped.py): stopped, UNRESPONSIVE, before the heartbeat
    rule's 3 s would have fired (the stall rule is out of the way)."""
    with (
        sidecar("--heartbeat-timeout-s", "3", "--stall-timeout-s", "600") as sc,
        Workers(
            2,
            sc.target,
            short_tmpdir(),
            job_id="stop2",
            args=[
                "--steps",
                "400",
                "--step-s",
                "0.02",
                "--hang-rank",
                "1",
                "--hang-at",
                "10",
                "--hang-how",
                "stop",
            ],
        ) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "stop2", timeout_s=180)
        assert inc["rule"] == "stopped", inc  # the first incident: no heartbeat before it
        assert inc["verdict"] == "UNRESPONSIVE" and inc["ranks"] == [1]
        assert inc["pids"] == [w.pids[1]]
        assert inc["evidence"]["1"]["state"] == "T"
        assert inc["evidence"]["1"]["report_age_s"] < 3.0, inc["evidence"]
        action = wait_for(lambda: sc.incidents("action"), 30, what="kill")[0]
        outcome = action["outcomes"]["1"]
        # Stopped: SIGKILLed as it is, never resumed for a SIGTERM handler.
        assert outcome["exited"] and outcome["signals"] == ["SIGKILL"]
        assert outcome["signalled_first"] == "SIGKILL"
        assert w.wait(30)[1] is not None  # the stopped process is really gone


def test_killed_rank_is_dead_at_once() -> None:
    """A rank that vanishes (here: os._exit mid-step) is DEAD within a tick, not after a timeout."""
    with (
        sidecar("--heartbeat-timeout-s", "30", "--stall-timeout-s", "600") as sc,
        Workers(
            2,
            sc.target,
            short_tmpdir(),
            job_id="exit2",
            args=[
                "--steps",
                "400",
                "--step-s",
                "0.02",
                "--hang-rank",
                "0",
                "--hang-at",
                "10",
                "--hang-how",
                "exit",
            ],
        ),
    ):
        inc = sc.wait_incident(lambda r: r["rule"] == "exit", timeout_s=180)
        assert inc["verdict"] == "DEAD" and inc["ranks"] == [0]
        assert inc["evidence"]["0"]["pid_alive"] is False
        assert inc["action"] == "observe"
        # Seen when the stream broke, not by the 30 s heartbeat timeout (the margin
        # is for a loaded CI machine; it is a few ticks when quiet).
        assert inc["detection_latency_s"] < 5.0


def test_long_declared_checkpoint_is_never_killed() -> None:
    """Rank 0 checkpoints for 8 s inside hook.phase(); the stall limit is 3 s."""
    with (
        sidecar("--stall-timeout-s", "3", "--heartbeat-timeout-s", "5") as sc,
        Workers(
            4,
            sc.target,
            short_tmpdir(),
            job_id="ckpt",
            args=[
                "--steps",
                "40",
                "--step-s",
                "0.02",
                "--ckpt-every",
                "15",
                "--ckpt-s",
                "8",
                "--ckpt-rank",
                "0",
            ],
        ) as w,
    ):
        codes = w.wait(150)
        assert codes == [0, 0, 0, 0], [w.log_text(r)[-2000:] for r in range(4)]
        assert len(w.events("checkpoint")) == 2 and w.max_step() == 40
        assert sc.incidents() == [], sc.incidents()


def test_dry_run_reports_but_does_not_kill() -> None:
    with (
        sidecar("--stall-timeout-s", "2", "--dry-run", "--hang-patience-s", "0") as sc,
        Workers(
            2,
            sc.target,
            short_tmpdir(),
            job_id="dry",
            args=["--steps", "400", "--step-s", "0.02", "--hang-rank", "1", "--hang-at", "8"],
        ) as w,
    ):
        inc = sc.wait_incident(lambda r: r["rule"] == "stall", timeout_s=180)
        assert inc["dry_run"] is True and inc["action"] == "kill"
        action = wait_for(lambda: sc.incidents("action"), 20, what="dry-run record")[0]
        assert action["dry_run"] is True
        time.sleep(1.0)
        assert all(p.poll() is None for p in w.procs)  # nobody was signalled
        assert "dry run: would kill" in sc.log_text()
