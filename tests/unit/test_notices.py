"""A kill notice names the kill on the errors that follow it (issue 12, item 7).

The notice is handed to the hook as its reporter thread does on a ``Notice``
command (the sidecar side and the DDP path run end to end in
tests/test_kill_notice_e2e.py); the collective error is raised by hand,
because one process has no peer to lose.
"""

from __future__ import annotations

import logging

import pytest

from tests.support import short_tmpdir
from trainprobe.hooks import LivenessProbeHook
from trainprobe.hooks.watch import notices
from trainprobe.proto import probe_pb2


@pytest.fixture
def notice(caplog: pytest.LogCaptureFixture) -> notices.KillNotice:
    pb = probe_pb2.Notice(
        incident_id="ab12-3",
        job_id="job",
        killed_ranks=[1],
        verdict="HUNG",
        rule="stall",
        reason="rank 1 stuck at train.py:88 (sleep)",
    )
    with caplog.at_level(logging.WARNING, logger="trainprobe.hooks"):
        notices.receive_pb(pb)
    assert [r.getMessage() for r in caplog.records] == [
        "trainprobe killed rank 1 of job job: HUNG (stall): rank 1 stuck at train.py:88 "
        "(sleep) [incident ab12-3]; collectives with that rank will now fail on this rank"
    ]
    n = notices.latest()
    assert n is not None
    yield n
    notices._latest = None  # the module keeps one per process


def test_an_error_in_hook_collective_carries_the_kill(notice: notices.KillNotice) -> None:
    hook = LivenessProbeHook(target=f"unix://{short_tmpdir()}/none.sock", rank=0, job_id="job")
    try:
        with pytest.raises(RuntimeError) as info, hook.collective("metrics"):
            raise RuntimeError("Connection closed by peer [127.0.0.1]:4242")
    finally:
        hook.close()
    (note,) = info.value.__notes__
    assert note.startswith("trainprobe killed rank 1 of job job: HUNG (stall)")
    assert "[incident ab12-3]" in note and "not from a trainprobe fault" in note


def test_no_notice_no_note() -> None:
    err = RuntimeError("Connection closed by peer")
    assert notices.explain(err) is err
    assert not hasattr(err, "__notes__")


def test_a_sidecar_cannot_make_the_line_unbounded() -> None:
    n = notices.KillNotice("i" * 1000, "j" * 1000, list(range(1000)), "HUNG", "stall", "x" * 10**5)
    assert len(n.line) < 700
