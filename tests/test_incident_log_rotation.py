"""The incident log rotates by size without losing a record, off the caller's thread,
and ``trainprobe incidents`` reads the rotated set, oldest first."""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

from trainprobe.sidecar.act.incident_log import IncidentLog, log_set, rotated
from trainprobe.sidecar.cli import ctl


def record(n: int) -> dict[str, object]:
    # ~200 bytes: an incident whose job and time say which one it is.
    return {
        "type": "incident", "id": f"inc-{n:05d}", "job_id": "rot", "time": 1.78e9 + n,
        "rule": "stall", "verdict": "HUNG", "culprits": [n % 4], "action": "observe",
        "pad": "x" * 80,
    }  # fmt: skip


def on_disk(path: Path) -> list[str]:
    return [json.loads(line)["id"] for f in log_set(path) for line in f.read_text().splitlines()]


def test_rotation_keeps_every_record_in_order_and_each_file_bounded(tmp_path: Path) -> None:
    path = tmp_path / "incidents.jsonl"
    log = IncidentLog(path, max_bytes=4096, rotated_files=1000)
    for n in range(600):
        log.write(record(n))
    log.close()
    files = log_set(path)
    assert len(files) > 20 and files[-1] == path and files[0] == rotated(path, len(files) - 1)
    assert all(f.stat().st_size <= 4096 for f in files)
    assert on_disk(path) == [f"inc-{n:05d}" for n in range(600)]  # none lost, none twice


def test_rotation_keeps_the_newest_files_only(tmp_path: Path) -> None:
    path = tmp_path / "incidents.jsonl"
    rotated(path, 9).write_text("")  # left by a sidecar that kept more: goes too
    log = IncidentLog(path, max_bytes=4096, rotated_files=2)
    for n in range(600):
        log.write(record(n))
    log.close()
    assert log_set(path) == [rotated(path, 2), rotated(path, 1), path]
    ids = on_disk(path)
    assert ids == [f"inc-{n:05d}" for n in range(600 - len(ids), 600)]  # the newest, in order


def test_rotation_runs_on_the_writer_thread(tmp_path: Path) -> None:
    """While the writer is busy (here: held), write() still returns at once."""
    path = tmp_path / "incidents.jsonl"
    log = IncidentLog(path, max_bytes=2048, rotated_files=100)
    with log._lock:  # the writer thread waits here, as behind a slow disk
        start = time.monotonic()
        futures = [log.write(record(n)) for n in range(200)]
        took = time.monotonic() - start
        assert not any(f.done() for f in futures)
        assert log_set(path) == [path]  # nothing rotated by the caller
    for f in futures:
        f.result(10)
    log.close()
    assert took < 1.0, took  # 200 queued records: no disk work on the caller's thread
    assert len(log_set(path)) > 5
    assert on_disk(path) == [f"inc-{n:05d}" for n in range(200)]


def test_incidents_command_reads_the_rotated_set_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "incidents.jsonl"
    log = IncidentLog(path, max_bytes=2048, rotated_files=100)
    for n in range(60):
        log.write(record(n))
    log.close()
    assert len(log_set(path)) > 3
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert ctl.main(["incidents", "--json", "--log", str(path)]) == 0
    assert [s["id"] for s in json.loads(out.getvalue())] == [f"inc-{n:05d}" for n in range(60)]
    assert err.getvalue() == ""
