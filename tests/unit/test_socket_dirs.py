"""Where a socket lives: the shared-directory rule, names that bind an owner,
and the runtime directory's fallback (trainprobe.proto.endpoints).

Real directories with real owners (chown needs root: skipped otherwise).
The shared-directory rule applies to a non-root user only; it is run for
real as UID 1000 in tests/test_pod_dirs.py.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest

from trainprobe.proto import parse_endpoint, private_dir, resolve_socket, runtime_dir
from trainprobe.proto import socket_dir_problem as problem

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")


def _dir(parent: Path, name: str, uid: int, mode: int = 0o711) -> Path:
    d = parent / name
    d.mkdir()
    os.chown(d, uid, uid)
    os.chmod(d, mode)
    return d


@needs_root
def test_a_directory_named_for_its_owner_is_trusted_and_no_other(tmp_path: Path) -> None:
    assert problem(_dir(tmp_path, "trainprobe-1000", 1000)) is None
    assert "owned by uid 1001" in (problem(_dir(tmp_path, "trainprobe-1002", 1001)) or "")
    assert "owned by uid 1000" in (problem(_dir(tmp_path, "sockets", 1000)) or "")
    assert "writable by others" in (problem(_dir(tmp_path, "trainprobe-1003", 1003, 0o777)) or "")
    os.symlink(tmp_path / "trainprobe-1000", tmp_path / "trainprobe-1004")
    assert "symbolic link" in (problem(tmp_path / "trainprobe-1004") or "")


def test_roots_own_shared_directory_is_its_own_and_tcp_is_left_alone(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)
    if os.geteuid() == 0:
        assert private_dir(tmp_path) == tmp_path  # root tightens it instead
    else:
        assert os.lstat(tmp_path).st_uid != 0 and private_dir(tmp_path) == tmp_path
    tcp = parse_endpoint("tcp://127.0.0.1:7070")
    assert resolve_socket(tcp) is tcp


@needs_root
def test_a_sticky_directory_anyone_writes_is_shared_for_root_too(tmp_path: Path) -> None:
    """/tmp itself (1777): a root sidecar asked to listen there made it 1755,
    and the CLI said to chmod 700 it; both ends now use root's trainprobe-0."""
    os.chmod(tmp_path, 0o1777)
    assert private_dir(tmp_path) == tmp_path / "trainprobe-0"
    ep = resolve_socket(parse_endpoint(f"unix://{tmp_path}/s.sock"))
    assert ep.path == str(tmp_path / "trainprobe-0" / "s.sock")


@pytest.fixture
def tmp_as_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as this process's <tmp> (what $TMPDIR sets), a fresh $HOME."""
    monkeypatch.delenv("TRAINPROBE_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_the_runtime_dir_is_the_tmp_one_when_free_or_ours(tmp_as_tempdir: Path) -> None:
    mine = tmp_as_tempdir / f"trainprobe-{os.getuid()}"
    assert runtime_dir() == mine
    mine.mkdir(mode=0o700)
    assert runtime_dir() == mine


@needs_root
def test_a_squatted_runtime_dir_falls_back_to_home_with_one_warning(
    tmp_as_tempdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    squat = _dir(tmp_as_tempdir, f"trainprobe-{os.getuid()}", 65534, 0o755)
    fallback = tmp_as_tempdir / "home" / ".trainprobe" / "run"
    with caplog.at_level(logging.WARNING, logger="trainprobe"):
        assert runtime_dir() == fallback
        assert runtime_dir() == fallback
    lines = [
        r.getMessage() for r in caplog.records if "another user made it first" in r.getMessage()
    ]
    assert len(lines) == 1, lines
    assert f"{squat} is owned by uid 65534" in lines[0] and str(fallback) in lines[0]


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_runtime_dir_name_taken_by_a_symlink_or_a_file_falls_back(
    tmp_as_tempdir: Path, kind: str
) -> None:
    name = tmp_as_tempdir / f"trainprobe-{os.getuid()}"
    if kind == "symlink":
        os.symlink(tmp_as_tempdir, name)
    else:
        name.write_text("")
    assert runtime_dir() == tmp_as_tempdir / "home" / ".trainprobe" / "run"


def test_an_explicit_runtime_dir_has_no_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINPROBE_RUNTIME_DIR", str(tmp_path / "mine"))
    assert runtime_dir() == tmp_path / "mine"
