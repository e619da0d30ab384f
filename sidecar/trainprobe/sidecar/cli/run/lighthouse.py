"""The torchft lighthouse of ``trainprobe run``: started on a port it binds itself.

It listens on ``--master-addr`` only (its dashboard has a route that kills a
replica, with no authentication: docs/SECURITY.md says what any local user can
still do), binds port 0 and says the port in its log, which the launcher reads
back: a port picked free here and handed to it could be bound by another process
in between, which the groups would then take for the lighthouse.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from trainprobe.proto.lighthouse import MIN_REPLICAS
from trainprobe.sidecar.cli.extras import install_hint

__all__ = ["LaunchError", "start_lighthouse"]


class LaunchError(Exception):
    """The job cannot start; the line says why."""


#: The lighthouse's first line once bound (torchft 0.2.0; the host is the machine's name).
_LISTENING = re.compile(rb"Lighthouse listening on: \S*:(\d+)\s")


def start_lighthouse(args: argparse.Namespace, log_dir: Path, helpers: list[Any]) -> str:
    """Start torchft's lighthouse (see the module's doc); its address once it
    accepts connections."""
    binary = Path(sys.executable).with_name("torchft_lighthouse")
    found = str(binary) if binary.exists() else shutil.which("torchft_lighthouse")
    if not found:
        raise LaunchError(f"no torchft_lighthouse: {install_hint('torchft')}")
    # The listening line is at info: kept whatever RUST_LOG the user set.
    rust_log = os.environ.get("RUST_LOG")
    env = dict(os.environ, RUST_LOG=f"{rust_log},torchft::lighthouse=info" if rust_log else "info")
    with _own_log(log_dir / "lighthouse.log") as log:
        proc = subprocess.Popen(
            [
                found,
                # Never every interface: its dashboard has a route that kills a replica.
                *("--bind", _bind_address(args.master_addr, 0)),
                *("--min_replicas", str(MIN_REPLICAS)),
                *("--join_timeout_ms", str(args.join_timeout_ms)),
                *("--heartbeat_timeout_ms", str(args.heartbeat_timeout_ms)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        # pread: the lighthouse shares this file's offset, which a read would move.
        reader = os.dup(log.fileno())
    helpers.append(proc)
    try:
        port = _await_port(proc, reader, log_dir)
    finally:
        os.close(reader)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LaunchError(f"the lighthouse exited {proc.returncode}: see {log_dir}")
        try:
            socket.create_connection((args.master_addr, port), timeout=0.5).close()
            return f"http://{args.master_addr}:{port}"
        except OSError:
            time.sleep(0.05)
    raise LaunchError(f"the lighthouse did not listen within 30 s: see {log_dir}")


def _await_port(proc: subprocess.Popen[bytes], fd: int, log_dir: Path) -> int:
    """The port the lighthouse bound, from the first lines of its log."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = _LISTENING.search(os.pread(fd, 4096, 0))
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise LaunchError(f"the lighthouse exited {proc.returncode}: see {log_dir}")
        time.sleep(0.05)
    raise LaunchError(f"the lighthouse did not say its port within 30 s: see {log_dir}")


def _bind_address(host: str, port: int) -> str:
    """``ip:port`` of ``host``, as the lighthouse's --bind reads it."""
    try:
        # IPv4, as the groups reach it by this name.
        ip = str(socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except OSError as err:
        raise LaunchError(f"--master-addr {host}: {err}") from None
    return f"{ip}:{port}"


def _own_log(path: Path) -> IO[bytes]:
    """``path`` opened to be written afresh, never through a link someone placed there
    (a --log-dir that another user can write), and only if it is a file of ours."""
    # Read too: the launcher reads the lighthouse's port back from it.
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as err:
        why = "a symbolic link" if err.errno == errno.ELOOP else err.strerror
        raise LaunchError(f"cannot write the log {path}: {why}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        raise LaunchError(f"cannot write the log {path}: not a file of ours alone")
    os.ftruncate(fd, 0)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb")
