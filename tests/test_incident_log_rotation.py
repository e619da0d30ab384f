"""The incident log rotates by size without losing a record, off the caller's thread,
and ``trainprobe incidents`` reads the rotated set, oldest first."""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tests.raw_client import connect
from tests.support import SidecarProcess, short_tmpdir, wait_for
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2
from trainprobe.sidecar.act.incident_log import IncidentLog, log_set, rotated
from trainprobe.sidecar.cli import ctl
from trainprobe.sidecar.cli.incidents.log_stream import log_files, read_records


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


def _silent_client(target: str, job: str, stop: threading.Event) -> None:
    """A rank that says hello, reports once, then goes silent with its stream open."""

    def messages() -> Iterator[probe_pb2.WorkerMessage]:
        yield probe_pb2.WorkerMessage(
            hello=probe_pb2.Hello(
                protocol_version=PROTOCOL_VERSION, hook_version="test", job_id=job, rank=0,
                local_rank=0, world_size=1, host="h", pid=os.getpid(), interval_ms=100,
            )
        )  # fmt: skip
        now = time.monotonic_ns()
        yield probe_pb2.WorkerMessage(
            report=probe_pb2.Report(
                seq=1, mono_ns=now, wall_ns=time.time_ns(), has_step=True, last_step=1,
                last_step_mono_ns=now, total_steps=1,
            )
        )  # fmt: skip
        stop.wait(60)

    connect(target, messages())


def test_incidents_read_while_the_log_rotates_see_a_whole_run_of_it(tmp_path: Path) -> None:
    """A reader racing the writer's rotation (a file of the set renamed between the
    listing and the reading) sees each record once and no gap, and never fails."""
    path = tmp_path / "incidents.jsonl"
    log = IncidentLog(path, max_bytes=600, rotated_files=40)
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            log.write(record(n)).result(10)
            n += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(log_set(path)) > 10, 10, what="a rotated set")
        for _ in range(60):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = ctl.main(["incidents", "--json", "--log", str(path)])
            assert (code, err.getvalue()) == (0, "")
            seen = [int(s["id"][4:]) for s in json.loads(out.getvalue())]
            assert seen == list(range(seen[0], seen[0] + len(seen))), seen
    finally:
        stop.set()
        thread.join(10)
        log.close()


def test_a_sidecar_rotates_its_log_as_its_settings_say() -> None:
    work = short_tmpdir()
    stop = threading.Event()
    flags = ("--settle-s", "0", "--heartbeat-timeout-s", "0.5", "--on-unresponsive", "observe")
    rotation = ("--incident-log-max-bytes", "2048", "--incident-log-keep", "100")
    with SidecarProcess(work, *flags, *rotation) as sc:
        jobs = [f"rot-{n}" for n in range(6)]
        threads = [
            threading.Thread(target=_silent_client, args=(sc.target, j, stop), daemon=True)
            for j in jobs
        ]
        for t in threads:
            t.start()
        try:
            wait_for(
                lambda: {r["job_id"] for r in read_set(sc.incident_log)} >= set(jobs),
                30,
                what="an incident of each job",
            )
        finally:
            stop.set()
    assert len(log_set(sc.incident_log)) > 2
    for f in log_set(sc.incident_log):  # within the bound, or one record larger alone
        assert f.stat().st_size <= 2048 or f.read_bytes().count(b"\n") == 1
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert ctl.main(["incidents", "--json", "--log", str(sc.incident_log)]) == 0
    assert {s["job_id"] for s in json.loads(out.getvalue())} >= set(jobs)


def read_set(path: Path) -> list[dict[str, object]]:
    """The incidents in the set, read as `trainprobe incidents` does (the sidecar may
    rotate meanwhile)."""
    try:
        files = log_files(path)
    except FileNotFoundError:
        return []
    return [r for r, _ in read_records(files, lambda _: None) if r["type"] == "incident"]
