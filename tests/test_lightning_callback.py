"""The Lightning callback end to end: a real sidecar, a real two-rank Lightning
DDP job on CPU (tests/lightning_worker.py), real signals.

The job's script has one trainprobe line, ``callbacks=[LivenessProbeCallback()]``;
rank 1 is started by Lightning itself.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.framework_support import hung_rank_killed_alone, phases_until_exit, session_job
from tests.support import PYTHON, REPO, read_jsonl, short_tmpdir, sidecar, wait_for

pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.slow

WORKER = REPO / "tests" / "lightning_worker.py"


@contextlib.contextmanager
def lightning_job(target: str, job_id: str, *args: str) -> Iterator[tuple[subprocess.Popen, Path]]:
    """Run the two-rank job (rank 1 is rank 0's child); yields (rank 0's process, progress file)."""
    workdir = short_tmpdir("tp-pl-")
    progress = workdir / "progress.jsonl"
    cmd = [PYTHON, str(WORKER), "--progress", str(progress), "--workdir", str(workdir), *args]
    with session_job(cmd, workdir, target, job_id) as proc:
        yield proc, progress


def test_a_hung_rank_is_named_and_killed_alone_without_waiting_for_lightning() -> None:
    """Rank 1 sleeps in training_step 15 (before its backward); rank 0 waits in the allreduce."""
    with (
        sidecar("--sync-timeout-s", "2", "--stall-timeout-s", "8", "--hang-patience-s", "0") as sc,
        lightning_job(sc.target, "pl-hang", "--hang-rank", "1", "--hang-at", "15") as (proc, _),
    ):
        # Named through the DDP comm hook the callback registered by itself.
        out = hung_rank_killed_alone(sc, "pl-hang", "lightning_worker.py", timeout_s=90)
        # Lightning's SIGTERM handler only sets a flag: SIGKILL follows in 0.5 s, not 5.
        assert out["sigterm_caught"] and out["signals"] == ["SIGTERM", "SIGCONT", "SIGKILL"]
        assert out["exited"] and out["seconds"] < 2.0, out
        assert proc.wait(60) != 0  # rank 0 fails once its peer is gone
        assert len(sc.incidents()) == 1


def test_long_validation_sanity_check_and_checkpoints_are_never_stalls() -> None:
    """Each lasts longer than the stall threshold (2 s) and the start-up timeout."""
    args = [
        *("--max-steps", "25", "--step-s", "0.05"),
        *("--val-every", "10", "--val-batches", "3", "--val-batch-s", "1.0", "--sanity-steps", "3"),
        *("--ckpt-every", "12", "--ckpt-s", "3"),
    ]
    flags = ("--stall-timeout-s", "2", "--sync-timeout-s", "2", "--startup-timeout-s", "2.5")
    with sidecar(*flags) as sc, lightning_job(sc.target, "pl-long", *args) as (proc, progress):
        phases = phases_until_exit(sc, "pl-long", proc, 110)
        assert proc.wait(5) == 0
        rows = read_jsonl(progress)
        assert sorted(r["rank"] for r in rows if r["event"] == "done") == [0, 1]
        # The phases really were longer than the thresholds, so without them
        # the stall (or start-up) rule would have fired.
        vals = [r for r in rows if r["event"] == "validation"]
        assert {r["sanity"] for r in vals} == {True, False}
        assert all(r["seconds"] >= 2.5 for r in vals), vals
        ckpts = [r for r in rows if r["event"] == "checkpoint"]
        assert len(ckpts) == 2 and all(r["seconds"] >= 2.5 for r in ckpts), ckpts
        assert {"sanity_check", "validation", "checkpoint"} <= phases, phases
        assert sc.incidents() == [], sc.incidents()
        # fit ended with a Goodbye: nothing for the sidecar to judge afterwards.
        wait_for(lambda: sc.log_text().count("stream ended: goodbye") == 2, 10, what="Goodbyes")


@pytest.mark.parametrize("where", ["setup", "on_fit_start"])
def test_a_rank_hung_before_its_first_batch_is_named_in_seconds(where: str) -> None:
    """Rank 1 sleeps in the module's ``setup`` (rank 0 waits in Lightning's
    post-setup barrier) or ``on_fit_start`` (rank 0 waits in the run-stage
    barrier): after the process group and the callback's hook, before the
    first batch, the window of a restarted attempt's start-up. Shipped
    defaults: rule ``startup_straggler`` names it ``init_straggler_s`` (5 s)
    after rank 0 began waiting, not rule ``startup`` at ``startup_timeout_s``
    (600 s, before the fix), and, a verdict like a slow healthy start's, it is
    not killed before that start-up patience."""
    args = ["--start-sleep", f"{where}:1:3600"]
    with sidecar() as sc, lightning_job(sc.target, "pl-start", *args) as (proc, progress):
        inc = sc.wait_incident(lambda r: r["job_id"] == "pl-start", timeout_s=90)
        (stuck,) = [e for e in read_jsonl(progress) if e["event"] == "start_sleep"]
        assert stuck["rank"] == 1 and stuck["where"] == where, stuck
        assert inc["rule"] == "startup_straggler", inc
        d = inc["diagnosis"]
        assert d["culprits"] == [1] and d["waiting"] == [0], d
        stacks = d["stacks"]["1"]
        assert "in start_sleep" in stacks["where"] and f"in {where}" in stacks["stacks"], stacks
        named = inc["time"] - stuck["t"]
        print(f"\n{where} hang -> named {named:.1f} s ({inc['rule']})")
        assert named < 30, named
        assert proc.poll() is None and not sc.incidents("action"), sc.incidents("action")


def test_a_rank_slow_in_setup_is_not_named() -> None:
    """Rank 1 takes 3 s longer in ``setup`` than rank 0, which waits for it in
    the post-setup barrier: less than ``init_straggler_s``, so nothing is named
    and the job ends well."""
    args = ["--start-sleep", "setup:1:3", "--max-steps", "10"]
    with sidecar() as sc, lightning_job(sc.target, "pl-slow", *args) as (proc, progress):
        assert proc.wait(120) == 0
        assert [e["rank"] for e in read_jsonl(progress) if e["event"] == "start_sleep"] == [1]
        assert sc.incidents() == [], sc.incidents()
