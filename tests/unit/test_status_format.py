"""``trainprobe status`` rows for a watched suspect and a killed rank (issue 12)."""

from __future__ import annotations

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.cli.ctl import format_status


def test_a_watched_rank_reads_hung_with_its_patience_and_a_killed_one_killed() -> None:
    reply = probe_pb2.StatusReply(
        workers=[
            probe_pb2.WorkerStatus(
                job_id="j",
                rank=1,
                verdict="HUNG",
                state="connected",
                suspect="HUNG? 12 s of 90 s patience — rank 1 at loader.py:88 in get (reading)",
            ),
            probe_pb2.WorkerStatus(
                job_id="j",
                rank=2,
                verdict="OK",
                state="vanished",
                killed_rule="stopped",
                killed_incident="1a2b-3",
            ),
            probe_pb2.WorkerStatus(job_id="j", rank=3, verdict="OK", state="connected"),
        ]
    )
    narrow = format_status(reply).splitlines()
    assert narrow[0] == "job j  (3 workers)"
    assert max(len(line) for line in narrow) <= 100
    # A long state wraps under its column rather than widening the table.
    assert narrow[2].split()[0] == "1" and narrow[2].split()[6] == "HUNG?"
    assert narrow[3].startswith(" " * 40)
    joined = " ".join(" ".join(line.split()) for line in narrow[2:4])
    assert joined.endswith("12 s of 90 s patience — rank 1 at loader.py:88 in get (reading)")
    assert narrow[4].split()[-4:] == ["by", "stopped", "(incident", "1a2b-3)"]
    diag = {"j": {"kind": "straggler", "culprits": [1], "waiting": [3]}}
    told = format_status(reply, diagnoses=diag).splitlines()
    assert told[:2] == ["job j  (3 workers)", "  straggler: culprits [1], waiting [3]"]
    assert format_status(reply, wide=True, diagnoses=diag).splitlines()[-1] == (
        "job j: straggler: culprits [1], waiting [3]"
    )
    assert (
        format_status(reply, diagnoses={"j": {"kind": "healthy"}}).splitlines()[1].split()[0]
        == "RANK"
    )
    # Nobody named and nobody waiting: said in words, not as two empty lists.
    alone = format_status(reply, diagnoses={"j": {"kind": "inconclusive"}}).splitlines()
    assert alone[1] == "  inconclusive: no culprit named", alone
    lines = format_status(reply, wide=True).splitlines()
    assert lines[1].endswith(
        "HUNG?        12 s of 90 s patience — rank 1 at loader.py:88 in get (reading)"
    )
    assert lines[2].endswith("KILLED       by stopped (incident 1a2b-3)")
    assert "vanished" not in lines[2]
    assert lines[3].endswith("OK           connected")


def test_a_job_whose_streams_all_ended_reads_finished() -> None:
    ended = [
        probe_pb2.WorkerStatus(job_id="old", job_name="nightly", rank=r, state="goodbye")
        for r in (0, 1)
    ]
    live = probe_pb2.WorkerStatus(job_id="new", rank=0, verdict="OK", state="connected")
    lines = format_status(probe_pb2.StatusReply(workers=[live, *ended])).splitlines()
    heads = [line for line in lines if line.startswith("job ")]
    assert heads == ["job new  (1 worker)", "job nightly (id old)  (2 workers, finished)"]


def test_a_jobs_heading_takes_its_name_from_a_verified_rank() -> None:
    # An unverified session holding the lowest rank here (its real rank 0 runs on
    # another node) calls the job otherwise; the heading keeps the verified name.
    rows = [
        probe_pb2.WorkerStatus(job_id="j", job_name="renamed", rank=0, state="connected"),
        probe_pb2.WorkerStatus(
            job_id="j", job_name="train", rank=3, state="connected", verified=True
        ),
    ]
    text = format_status(probe_pb2.StatusReply(workers=rows))
    assert "job train (id j)" in text and "renamed" not in text, text
