"""The incident log on a disk that fills mid-record, then gets space back.

The kernel cuts a write that runs out of room short: part of the record is
on disk, the rest is not. Each record must then still be readable by any
JSONL reader: written whole (at once or later), never glued onto a torn line.

Two real ways to make the kernel cut the write, each in its own child
process running the real :class:`IncidentLog`:

- ``tmpfs``: a 64 KiB tmpfs (needs root and ``mount``, skipped otherwise),
  filled by another file until ``ENOSPC``; space comes back when that file
  is removed;
- ``fsize``: ``RLIMIT_FSIZE`` set just past the log's end (``EFBIG`` after a
  short write, the same cut as a full disk, and needs no privilege); space
  comes back when the limit is raised again.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import PYTHON, child_env, short_tmpdir
from trainprobe.sidecar.act.incident_log import IncidentLog, read_incident_log

BIG = 6000  # characters of the record that meets the full disk: over a page

CHILD = textwrap.dedent(
    """
    import errno, json, os, resource, signal, sys
    from pathlib import Path
    from trainprobe.sidecar.act.incident_log import IncidentLog

    how, where, BIG = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    log = IncidentLog(where / "incidents.jsonl")
    log.write({"type": "verdict", "incident": "first"}).result(10)
    size = os.path.getsize(log.path)
    if how == "tmpfs":
        with open(where / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"f" * 4096)
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
            try:
                while True:
                    fh.write(b"f")
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
    else:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))
    log.write({"type": "verdict", "incident": "torn", "pad": "x" * BIG}).result(10)
    if how == "tmpfs":
        os.unlink(where / "filler")
    else:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    log.write({"type": "verdict", "incident": "after"}).result(10)
    log.close()
    """
)


@pytest.fixture
def tmpfs() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    d = short_tmpdir("tp-full-")
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(d)],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)
        d.rmdir()


def _run(how: str, where: Path) -> None:
    out = subprocess.run(
        [PYTHON, "-c", CHILD, how, str(where), str(BIG)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    # The sidecar said so, once, and the kernel really cut the record short.
    assert out.stderr.count("cannot write incident log") == 1, out.stderr
    m = re.search(r"wrote (\d+) of (\d+) bytes", out.stderr)
    assert m is not None and 0 < int(m[1]) < int(m[2]), out.stderr


def _check(path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines()
    records = [json.loads(line) for line in lines]  # every line is a whole record
    assert text.endswith("\n")
    # Nothing lost either: the record that met the full disk is written once
    # space is back, before the next one.
    assert [r["incident"] for r in records] == ["first", "torn", "after"]
    assert len(records[1]["pad"]) == BIG


def test_a_record_cut_by_a_full_tmpfs_is_never_glued_to_the_next(tmpfs: Path) -> None:
    _run("tmpfs", tmpfs)
    _check(tmpfs / "incidents.jsonl")


def test_a_record_cut_by_the_file_size_limit_is_never_glued_to_the_next() -> None:
    d = short_tmpdir("tp-fsize-")
    _run("fsize", d)
    _check(d / "incidents.jsonl")


def test_a_log_left_with_a_cut_line_starts_the_next_record_on_a_fresh_line(
    tmp_path: Path,
) -> None:
    """A sidecar killed mid-write (or whose truncate failed) left a cut line."""
    path = tmp_path / "incidents.jsonl"
    path.write_bytes(b'{"incident":"first"}\n{"incident":"cut","pad":"xx')
    log = IncidentLog(path)
    log.write({"incident": "next"}).result(10)
    log.close()
    lines = path.read_text().splitlines()
    assert lines[-2] == '{"incident":"cut","pad":"xx'
    assert json.loads(lines[-1]) == {"incident": "next"}
    assert [r["incident"] for r in read_incident_log(path)] == ["first", "next"]


def test_a_late_record_after_close_also_starts_on_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "incidents.jsonl"
    log = IncidentLog(path)
    log.write({"incident": "first"}).result(10)
    log.close()
    with open(path, "ab") as fh:
        fh.write(b'{"incident":"cut"')  # another writer died mid-line meanwhile
    log.write({"incident": "late"}).result(10)
    assert [r["incident"] for r in read_incident_log(path)] == ["first", "late"]


def test_a_log_that_is_a_pipe_gets_whole_records_and_no_stray_newline() -> None:
    """``--incident-log /dev/stdout`` into a pipe: nothing to seek or read back."""
    r, w = os.pipe()
    try:
        log = IncidentLog(Path(f"/proc/self/fd/{w}"))
        log.write({"incident": "a"}).result(10)
        log.write({"incident": "b"}).result(10)
        log.close()
        assert os.read(r, 4096) == b'{"incident":"a"}\n{"incident":"b"}\n'
    finally:
        os.close(r)
        os.close(w)
