"""The incident log's rotated set, in a state directory that someone else can
write: the readers never block on, nor read forever from, a member that is no
regular file (a FIFO, a link to ``/dev/zero``), and the writer's rotation never
writes through a link placed at the log's name between its rename and its open.
Real files, a real FIFO, a real attacker process racing the writer.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ctl
from trainprobe.sidecar.act.incident_log import IncidentLog, log_set


def record(n: int) -> dict[str, object]:
    return {
        "type": "incident", "id": f"inc-{n:05d}", "job_id": "links", "time": 1.78e9 + n,
        "rule": "stall", "verdict": "HUNG", "culprits": [1], "action": "observe",
        "pad": "x" * 80,
    }  # fmt: skip


def test_a_fifo_or_a_device_in_the_rotated_set_blocks_no_reader(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    log.write_text(json.dumps(record(1)) + "\n")
    os.mkfifo(tmp_path / "incidents.jsonl.1")  # open() for reading waits for a writer
    os.symlink("/dev/zero", tmp_path / "incidents.jsonl.2")  # one endless line
    (tmp_path / "incidents.jsonl.3").mkdir()
    for cmd in (["incidents", "--json"], ["incidents"]):
        r = ctl(*cmd, "--log", str(log))
        assert r.returncode == 0, r.stderr
        assert "inc-00001" in r.stdout
        for n in (1, 2, 3):
            assert f"incidents.jsonl.{n}: not a regular file: skipped" in r.stderr, r.stderr


# Places a link to the victim at the log's name whenever the name is free.
RACER = r"""
import os, sys
victim, path = sys.argv[1], sys.argv[2]
print("ready", flush=True)
while True:
    try:
        os.symlink(victim, path)
    except FileExistsError:
        pass
"""


def test_rotation_never_writes_through_a_link_placed_at_the_logs_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    state = tmp_path / "state"
    state.mkdir()
    path = state / "incidents.jsonl"
    log = IncidentLog(path, max_bytes=1024, rotated_files=2)
    racer = subprocess.Popen(
        [sys.executable, "-c", RACER, str(victim), str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert racer.stdout is not None and racer.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 5
        n = 0
        while time.monotonic() < deadline:  # ~5 records a file: a rotation every few
            log.write(record(n))
            n += 1
            if n % 50 == 0:
                log.flush()
        log.flush()
    finally:
        racer.kill()
        racer.wait()
        log.close()
    assert victim.read_text() == "precious\n"


def test_a_directory_in_the_rotated_set_costs_one_line_and_no_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "incidents.jsonl"
    (tmp_path / "incidents.jsonl.1").mkdir()  # rotation's rename onto it fails
    log = IncidentLog(path, max_bytes=1024, rotated_files=2)
    with caplog.at_level(logging.ERROR, logger="trainprobe.sidecar"):
        for n in range(200):
            log.write(record(n))
        log.close()
    files = [f for f in log_set(path) if f.is_file()]
    ids = [json.loads(line)["id"] for f in files for line in f.read_text().splitlines()]
    assert ids == [f"inc-{n:05d}" for n in range(200)]
    lines = [r.getMessage() for r in caplog.records if "cannot rotate" in r.getMessage()]
    assert len(lines) <= 1, lines
