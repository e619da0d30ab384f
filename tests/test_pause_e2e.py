"""A paused job is not a hang: real gloo ranks, real SIGSTOP/SIGCONT, real cgroup freezers.

A scheduler's suspend (Slurm's ``scontrol suspend``), an operator's ``kill -STOP``
of every rank, or a cgroup freezer holds every rank of a job at once; the job
goes on when resumed. Before, both ranks of a job SIGSTOPped for 15 s were
killed as "stopped". The control, in the same setup: one rank stopped while its
peer runs and waits for it is still killed at once.

The sidecar runs with ``--hang-patience-s 0``: any judgement but "paused" would
kill at once, so 0 kills means the pause was recognised, not merely waited out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import SidecarProcess, Workers, short_tmpdir, sidecar, wait_for

TRAIN = ["--steps", "100000", "--step-s", "0.05", "--interval-ms", "100"]
FLAGS = ("--hang-patience-s", "0", "--kill-grace-s", "2")


def decisions(sc: SidecarProcess, job: str) -> list[dict]:
    return sc.incidents("decision", job=job)


def stepping(w: Workers, past: int, timeout_s: float = 120.0) -> None:
    wait_for(
        lambda: all(w.max_step(r) > past for r in range(w.n)), timeout_s, what=f"steps > {past}"
    )


def paused_rows(sc: SidecarProcess, job: str) -> list[str]:
    return [r.suspect for r in sc.status(job).workers if r.suspect.startswith("PAUSED")]


def hold_and_resume(
    sc: SidecarProcess, w: Workers, job: str, hold: object, release: object, held_s: float
) -> None:
    """Hold the whole job ``held_s``, resume it; assert no kill and that it trains on."""
    stepping(w, 10)
    hold()  # type: ignore[operator]
    try:
        held_at = time.monotonic()
        dec = wait_for(
            lambda: next(
                (d for d in sc.incidents("decision", job=job) if d["rule"] == "paused"), None
            ),
            held_s + 30,
            what="the paused decision",
        )
        assert dec["act"] is False and "paused" in dec["why"]
        assert paused_rows(sc, job), "trainprobe status does not say PAUSED"
        time.sleep(max(0.0, held_s - (time.monotonic() - held_at)))
        before = max(w.max_step(r) for r in range(w.n))
    finally:
        release()  # type: ignore[operator]
    stepping(w, before + 20)
    resumed = wait_for(
        lambda: next(
            (d for d in sc.incidents("decision", job=job) if d["rule"] == "resumed"), None
        ),
        30,
        what="the resumed decision",
    )
    assert resumed["paused_s"] > 0
    time.sleep(3.0)  # a kill after the resume would have come by now (patience 0)
    assert sc.incidents("action", job=job) == [], sc.incidents("action", job=job)
    assert all(p.poll() is None for p in w.procs), "a rank of the paused job died"
    incidents = sc.incidents("incident", job=job)
    assert incidents and all(i["action"] == "observe" for i in incidents), incidents


def stop_and_continue(sc: SidecarProcess, w: Workers, job: str, held_s: float) -> None:
    """:func:`hold_and_resume` by SIGSTOP of every rank, then SIGCONT."""

    def signal_all(sig: int) -> None:
        for pid in w.pids:
            os.kill(pid, sig)

    hold_and_resume(
        sc,
        w,
        job,
        lambda: signal_all(signal.SIGSTOP),
        lambda: signal_all(signal.SIGCONT),
        held_s,
    )


def test_a_job_sigstopped_for_15_s_then_continued_is_paused_and_never_killed() -> None:
    with (
        sidecar(*FLAGS) as sc,
        Workers(2, sc.target, short_tmpdir(), job_id="pause2", args=TRAIN) as w,
    ):
        stop_and_continue(sc, w, "pause2", 15.0)


def test_one_rank_stopped_while_its_peer_waits_is_still_killed_at_once() -> None:
    with (
        sidecar(*FLAGS) as sc,
        Workers(2, sc.target, short_tmpdir(), job_id="stop1of2", args=TRAIN) as w,
    ):
        stepping(w, 10)
        os.kill(w.pids[1], signal.SIGSTOP)
        action = wait_for(lambda: sc.incidents("action", job="stop1of2"), 120, what="the kill")[0]
        dec = next(d for d in sc.incidents("decision", job="stop1of2") if d.get("act"))
        assert dec["rule"] == "stopped" and dec["definitive"] is True
        assert list(action["outcomes"]) == ["1"]
        assert not any(d["rule"] == "paused" for d in sc.incidents("decision", job="stop1of2"))


# -- cgroup freezers (real ones: this needs a writable cgroupfs, e.g. root) -----------------


def _cgroup_dirs() -> Iterator[tuple[str, Path, str, str]]:
    """(version, the parent cgroup dir, the file that freezes, its frozen value)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        point, kinds = left.split()[4], right.split()
        if kinds[0] == "cgroup2" and Path(point, "cgroup.procs").exists():
            yield "v2", Path(point), "cgroup.freeze", "1"
        elif kinds[0] == "cgroup" and "freezer" in kinds[2].split(","):
            yield "v1", Path(point), "freezer.state", "FROZEN"


@contextlib.contextmanager
def freezer(version: str) -> Iterator[tuple[Path, str, str]]:
    found = [d for d in _cgroup_dirs() if d[0] == version]
    if not found:
        pytest.skip(f"no cgroup {version} freezer mounted")
    _, parent, knob, value = found[0]
    group = parent / f"trainprobe-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as err:
        pytest.skip(f"cannot create a cgroup under {parent}: {err}")
    try:
        if not (group / knob).exists():
            pytest.skip(f"{group} has no {knob}")
        yield group, knob, value
    finally:
        thaw = "0" if version == "v2" else "THAWED"
        with contextlib.suppress(OSError):
            (group / knob).write_text(thaw)
        with contextlib.suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            group.rmdir()


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_job_frozen_by_a_cgroup_freezer_is_paused_and_never_killed(version: str) -> None:
    with (
        freezer(version) as (group, knob, value),
        sidecar(*FLAGS) as sc,
        Workers(2, sc.target, short_tmpdir(), job_id=f"freeze-{version}", args=TRAIN) as w,
    ):
        for pid in w.pids:
            (group / "cgroup.procs").write_text(str(pid))
        thaw = "0" if version == "v2" else "THAWED"
        hold_and_resume(
            sc,
            w,
            f"freeze-{version}",
            lambda: (group / knob).write_text(value),
            lambda: (group / knob).write_text(thaw),
            10.0,
        )
        dec = next(
            d for d in sc.incidents("decision", job=f"freeze-{version}") if d["rule"] == "paused"
        )
        assert "frozen by a cgroup freezer" in dec["why"], dec
