"""Why an address cannot be listened on, said in one line before gRPC tries.

When gRPC cannot listen it only logs "Failed to add port" or "Failed to
bind", without the cause. So each address is bound once here first, with the
socket options gRPC's listener uses, and a failure becomes a
:class:`ListenError` that names the cause and the way out: the process that
holds a TCP port (read from /proc, where the kernel shows it), an address not
of this machine, a port below 1024, a Unix path that cannot hold a socket."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

__all__ = ["ListenError", "check_tcp_bind", "check_unix_bind", "port_owner"]


class ListenError(RuntimeError):
    """A listen address that cannot be served."""


def check_unix_bind(path: Path) -> None:
    """Bind ``path`` once ourselves (then remove it), to say in one line why
    gRPC could not: a file in the way of its directory, no permission."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(str(path))
        except OSError as err:
            raise ListenError(
                f"cannot create unix://{path}: {err.strerror}; "
                "choose another --listen unix:///PATH or set TRAINPROBE_RUNTIME_DIR"
            ) from None
    path.unlink()


def check_tcp_bind(host: str, port: int) -> None:
    """Bind ``host:port`` once ourselves, to say in one line why gRPC could not.

    Same socket options as gRPC's listener (SO_REUSEADDR), so a port in
    TIME_WAIT passes here as it does there.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ListenError(
            f"cannot listen on tcp://{host}:{port}: unknown host {host!r} ({err.strerror}); "
            "use tcp://0.0.0.0:PORT or an address of this machine"
        ) from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(addr)
        except OSError as err:
            raise ListenError(
                f"cannot listen on tcp://{host}:{port}: {_bind_advice(err, host, port)}"
            ) from None


def _bind_advice(err: OSError, host: str, port: int) -> str:
    if err.errno == errno.EADDRINUSE:
        owner = port_owner(port)
        who = f"pid {owner[0]} ({owner[1]})" if owner else "another process"
        return f"port {port} is in use by {who}; stop it or choose another port"
    if err.errno == errno.EADDRNOTAVAIL:
        return (
            f"{host} is not an address of this machine; "
            f"use tcp://0.0.0.0:{port} or one of its addresses"
        )
    if err.errno == errno.EACCES:
        return f"permission denied for port {port} (below 1024 needs root or CAP_NET_BIND_SERVICE)"
    return err.strerror or str(err)


_TCP_LISTEN = "0A"


def port_owner(port: int) -> tuple[int, str] | None:
    """(pid, command name) of the process listening on TCP ``port``, if /proc says.

    The socket's inode comes from /proc/net/tcp{,6}; its owner is the process
    with an fd on ``socket:[inode]``. Processes of other users are skipped
    where /proc hides their fds (then None: the caller says "another process").
    """
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)
                for line in fh:
                    f = line.split()
                    if (
                        len(f) > 9
                        and f[3] == _TCP_LISTEN
                        and int(f[1].rsplit(":", 1)[1], 16) == port
                    ):
                        inodes.add(f[9])
        except (OSError, ValueError):
            continue
    targets = {f"socket:[{i}]" for i in inodes if i != "0"}
    if not targets:
        return None
    for pid_dir in os.scandir("/proc"):
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = os.scandir(f"/proc/{pid_dir.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) in targets:
                        return int(pid_dir.name), _comm(pid_dir.name)
                except OSError:
                    continue
    return None


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return "?"
