"""A rotated set that someone else can write, with members that cannot be read:
``trainprobe incidents`` and ``report`` name each one in a line and read every
other record, and never end in a traceback. Before, one such member made
``incidents`` print nothing ("cannot read <the log>", exit 1) and ``report``
end in a traceback; a set longer than the descriptor limit did the same.
Real files, real links, the real command lines.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
from pathlib import Path

from tests.support import PYTHON, child_env, ctl


def record(n: int) -> dict[str, object]:
    return {
        "type": "incident", "id": f"inc-{n:05d}", "job_id": "unread", "time": 1.78e9 + n,
        "rule": "stall", "verdict": "HUNG", "culprits": [1], "action": "observe",
    }  # fmt: skip


def rotated_set(d: Path, files: int) -> Path:
    """The log and ``files - 1`` rotated files, one record each, oldest the highest."""
    log = d / "incidents.jsonl"
    for n in range(files):
        name = log.name if n == files - 1 else f"{log.name}.{files - 1 - n}"
        (d / name).write_text(json.dumps(record(n)) + "\n")
    return log


def ids(out: str) -> list[str]:
    return [s["id"] for s in json.loads(out)]


def test_members_that_cannot_be_opened_or_read_cost_one_line_each(tmp_path: Path) -> None:
    log = rotated_set(tmp_path, 5)
    for n in (1, 2, 3):
        (tmp_path / f"incidents.jsonl.{n}").unlink()
    os.symlink("incidents.jsonl.1", tmp_path / "incidents.jsonl.1")  # a loop: ELOOP
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "incidents.jsonl.2"))  # opening a socket: ENXIO
    os.symlink("/proc/self/mem", tmp_path / "incidents.jsonl.3")  # regular, reading: EIO
    r = ctl("incidents", "--json", "--log", str(log))
    assert r.returncode == 0, r.stderr
    assert ids(r.stdout) == ["inc-00000", "inc-00004"], r.stderr
    named = [ln for ln in r.stderr.splitlines() if "cannot read (" in ln]
    assert len(named) == 3 and all(f"incidents.jsonl.{n}" in "".join(named) for n in (1, 2, 3))
    assert "Traceback" not in r.stderr
    page = tmp_path / "page"
    r = ctl(
        "report", "--log", str(log), "--out", str(page), "--watch-s", "0",
        TRAINPROBE_TARGET=f"unix://{tmp_path}/none.sock",
    )  # fmt: skip
    assert r.returncode == 0 and "(2 incident(s)" in r.stdout, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


def test_a_set_longer_than_the_descriptor_limit_reads_its_newest_files(tmp_path: Path) -> None:
    log = rotated_set(tmp_path, 300)
    cmd = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl"]
    r = subprocess.run(
        [*cmd, "incidents", "--json", "--log", str(log)],
        env=child_env(), capture_output=True, text=True, timeout=60,
        preexec_fn=_few_descriptors,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    seen = ids(r.stdout)
    assert seen and seen[-1] == "inc-00299", seen
    assert seen == [f"inc-{n:05d}" for n in range(300 - len(seen), 300)]  # the newest, in order
    assert "oldest" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run(
        [*cmd, "report", "--log", str(log), "--out", str(tmp_path / "page"), "--watch-s", "0"],
        env=child_env(TRAINPROBE_TARGET=f"unix://{tmp_path}/none.sock"),
        capture_output=True, text=True, timeout=60, preexec_fn=_few_descriptors,
    )  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr


def test_a_log_path_with_no_name_is_no_traceback(tmp_path: Path) -> None:
    """``--log .`` (a directory, no file name): a file named ``.1`` beside it is
    no rotated file of it (before: ``ValueError: PosixPath('.') has an empty name``)."""
    (tmp_path / ".1").write_text(json.dumps(record(1)) + "\n")
    r = subprocess.run(
        [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "incidents", "--log", "."],
        env=child_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert ".: not a regular file: skipped" in r.stderr, r.stderr
