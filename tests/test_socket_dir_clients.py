"""The socket-directory rule on every client of a sidecar socket (issue 13, item 4).

The sidecar refuses to listen in a directory another user could write; the
hook refuses to connect through one. ``trainprobe status`` / ``diagnose`` and
a relay node's upstream link follow the same rule (``check_socket_dir``): a
socket in such a directory may be an impostor's. Real directories with real
modes (0777, and a real chown to uid 65534 as root), real CLI and sidecar
processes, and a listening socket there that counts every connect made to it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support import PYTHON, SidecarProcess, child_env, short_tmpdir, wait_for

NOBODY = 65534


class Impostor:
    """A socket that accepts and counts connects (then hangs up), in ``directory``."""

    def __init__(self, directory: Path, name: str = "sidecar.sock") -> None:
        self.path = directory / name
        self.accepted = 0
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(self.path))
        self._srv.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._srv.close()


def _open_dir() -> Path:
    """Our own directory, writable by everyone (mode 0777)."""
    d = short_tmpdir("tp-open-")
    os.chmod(d, 0o777)
    return d


def _nobodys_dir() -> Path:
    """A directory owned by another user (uid 65534), writable by no one else."""
    if os.geteuid() != 0:
        pytest.skip("needs root to chown a directory to another uid (65534)")
    d = short_tmpdir("tp-nobody-")
    os.chown(d, NOBODY, NOBODY)
    os.chmod(d, 0o755)
    return d


def _run(args: list[str], timeout_s: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, *args], capture_output=True, text=True, env=child_env(**env), timeout=timeout_s
    )


def _error_line(out: subprocess.CompletedProcess) -> str:
    """The one error line of a refused run: exit status 2, no traceback."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and " INFO " not in ln]
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert len(lines) == 1, out.stderr
    return lines[0]


CTL = ["-m", "trainprobe.sidecar.cli.ctl"]


@pytest.mark.parametrize("command", ["status", "diagnose"])
def test_the_cli_never_connects_to_a_socket_in_a_directory_others_can_write(command: str) -> None:
    d = _open_dir()
    impostor = Impostor(d)
    try:
        out = _run([*CTL, command, "--target", f"unix://{impostor.path}", "--timeout-s", "2"])
        line = _error_line(out)
        assert line.startswith(f"trainprobe: error: not connecting to unix://{impostor.path}:")
        assert "is writable by others (mode 0777)" in line and f"chmod 700 {d}" in line
        # The default target (the per-user runtime directory) and $TRAINPROBE_TARGET alike.
        out = _run([*CTL, command, "--timeout-s", "2"], TRAINPROBE_RUNTIME_DIR=str(d))
        assert "writable by others" in _error_line(out)
        out = _run([*CTL, command, "--timeout-s", "2"], TRAINPROBE_TARGET=str(impostor.path))
        assert "writable by others" in _error_line(out)
        time.sleep(0.2)  # a connect in flight would have been counted by now
        assert impostor.accepted == 0
    finally:
        impostor.close()


def test_the_cli_refuses_a_directory_another_user_owns() -> None:
    d = _nobodys_dir()
    impostor = Impostor(d)
    try:
        for command in ("status", "diagnose"):
            out = _run([*CTL, command, "--target", f"unix://{impostor.path}", "--timeout-s", "2"])
            assert f"is owned by uid {NOBODY}" in _error_line(out)
        assert impostor.accepted == 0
    finally:
        impostor.close()


def test_the_cli_still_talks_to_a_sidecar_in_a_private_directory() -> None:
    with SidecarProcess(short_tmpdir()) as sc:
        out = _run([*CTL, "status", "--target", sc.target])
        assert out.returncode == 0 and "(no workers have reported)" in out.stdout, out.stderr


def test_a_root_sidecar_asked_for_a_socket_in_a_sticky_tmp_leaves_it_as_it_was() -> None:
    """Root's `--listen unix:///tmp/x.sock` made /tmp 1755 (its own, so
    "tightened"), and the CLI said to chmod 700 /tmp. A sticky directory anyone
    writes is shared: both ends use root's trainprobe-0 inside it."""
    if os.geteuid() != 0:
        pytest.skip("the rule for root: a non-root user already treats /tmp as shared")
    d = short_tmpdir("tp-sticky-")
    os.chmod(d, 0o1777)
    with SidecarProcess(d) as sc:
        assert os.stat(d).st_mode & 0o7777 == 0o1777
        assert (d / "trainprobe-0" / "sidecar.sock").is_socket()
        out = _run([*CTL, "status", "--target", sc.target])
        assert out.returncode == 0 and "(no workers have reported)" in out.stdout, out.stderr


def _relay(upstream: str, listen_dir: Path) -> list[str]:
    return [
        "-m",
        "trainprobe.sidecar",
        "--relay-to",
        upstream,
        "--listen",
        f"unix://{listen_dir}/node.sock",
    ]


def test_a_relay_node_refuses_an_upstream_in_a_directory_others_can_write() -> None:
    d = _open_dir()
    impostor = Impostor(d)
    mine = short_tmpdir()
    try:
        out = _run(_relay(f"unix://{impostor.path}", mine))
        line = _error_line(out)
        assert line.startswith(
            f"trainprobe-sidecar: error: not relaying to unix://{impostor.path}: "
        )
        assert "is writable by others (mode 0777)" in line
        assert impostor.accepted == 0
        assert not (mine / "node.sock").exists()  # refused before listening
    finally:
        impostor.close()


def test_a_relay_node_refuses_an_upstream_directory_another_user_owns() -> None:
    d = _nobodys_dir()
    impostor = Impostor(d)
    try:
        out = _run(_relay(f"unix://{impostor.path}", short_tmpdir()))
        assert f"is owned by uid {NOBODY}" in _error_line(out)
        assert impostor.accepted == 0
    finally:
        impostor.close()


def test_a_relay_node_refuses_to_listen_in_a_directory_another_user_owns() -> None:
    d = _nobodys_dir()
    out = _run(_relay(f"unix://{short_tmpdir()}/up.sock", d))
    line = _error_line(out)
    assert line.startswith(f"trainprobe-sidecar: error: refusing to listen on unix://{d}/node.sock")
    assert f"is owned by uid {NOBODY}" in line
    assert not (d / "node.sock").exists()


def test_a_relay_node_checks_again_before_every_try() -> None:
    """The upstream's directory is missing at start (nothing to judge yet); someone
    then makes it 0777 and listens there: the node keeps retrying, never connects."""
    parent = short_tmpdir()
    later = parent / "up"
    node = SidecarProcess(short_tmpdir("tpnode-"), "--relay-to", f"unix://{later}/sidecar.sock")
    with node:
        # A try that finds no directory does not open a channel at all: one that
        # did would let gRPC connect once the directory appeared, past the check
        # (an impostor that made it 0777 and listened between the two was accepted).
        wait_for(lambda: "is down" in node.log_text(), 15, what="the node's first try")
        down = next(line for line in node.log_text().splitlines() if "is down" in line)
        assert f"{later} does not exist yet" in down, down
        assert "UNAVAILABLE" not in down, down
        aside = parent / "aside"  # appears at once as 0777: made aside, then renamed
        aside.mkdir()
        os.chmod(aside, 0o777)
        aside.rename(later)
        impostor = Impostor(later)
        try:
            wait_for(lambda: "not relaying to" in node.log_text(), 15, what="the node's refusal")
            assert f"{later} is writable by others (mode 0777)" in node.log_text()
            assert impostor.accepted == 0
            assert node.proc is not None and node.proc.poll() is None  # still serving
        finally:
            impostor.close()
