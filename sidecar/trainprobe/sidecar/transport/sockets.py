"""Listening: Unix sockets guarded by file permissions, TCP by a bearer token.

Unix listeners get a 0600 socket in a 0700 directory (wider only as
``socket_access`` asks, for workers of another uid), and beside it the
identity socket that hands out tickets (:mod:`trainprobe.sidecar.transport.identity`).
A socket asked for in a shared directory (root's, writable by anyone: a
kubelet's emptyDir) goes into this user's own ``trainprobe-<uid>`` inside it,
where hooks aimed at the same path look too (:func:`trainprobe.proto.resolve_socket`).
TCP listeners live on a second server whose interceptor checks the bearer
token, since an interceptor cannot tell which port a call came in on.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from trainprobe.proto import (
    MESSAGE_SIZE_OPTIONS,
    UnsafeSocketDir,
    ident_socket_path,
    parse_endpoint,
    resolve_socket,
    socket_dir_problem,
)
from trainprobe.sidecar.config.tls import read_pem
from trainprobe.sidecar.core.limits import MAX_SESSIONS
from trainprobe.sidecar.transport.auth import TokenInterceptor
from trainprobe.sidecar.transport.identity import TicketDesk

log = logging.getLogger("trainprobe.sidecar")

#: gRPC core queues the calls that arrive before the server asks for the next
#: one (grpc.aio asks one at a time, from our loop), and past 1,000 queued it
#: cancels new ones at random (all past 3,000): a burst of stream opens (every
#: rank of a large job at once) lost hundreds of streams right after their
#: Hello, CANCELLED (bench/bench_burst.py). Queue as many as sessions can exist;
#: beyond them the registry refuses anyway.
PENDING_CALLS = MAX_SESSIONS
#: How long such a call may wait to be asked for. gRPC's default, 30 s, cancels
#: it after that: while a loaded loop applies 2,000 streams' reports at 10 Hz
#: it asks for new calls slowly, and 1,236 of 2,000 streams opening at once
#: ended CANCELLED 30 s in, before the sidecar saw their Hello
#: (bench/bench_scale.py). The queue is bounded by ``PENDING_CALLS``.
PENDING_CALL_WAIT_S = 300
SERVER_OPTIONS = [
    *MESSAGE_SIZE_OPTIONS,
    ("grpc.so_reuseport", 0),
    ("grpc.server.max_pending_requests", PENDING_CALLS),
    ("grpc.server.max_pending_requests_hard_limit", PENDING_CALLS),
    ("grpc.server_max_unrequested_time_in_server", PENDING_CALL_WAIT_S),
]

#: ``socket_access`` -> (mode bits the socket directory must add, socket mode).
#: Connecting needs search (x) on the directory and write on the socket; no
#: one but the owner ever gets to write or list the directory.
SOCKET_ACCESS: dict[str, tuple[int, int]] = {
    "user": (0o700, 0o600),
    "group": (0o710, 0o660),
    "all": (0o711, 0o666),
}


class ListenError(RuntimeError):
    """A listen address that cannot be served."""


class UnsafeListenDir(ListenError, UnsafeSocketDir):
    """A socket directory another user could write (the programs exit with 2)."""


def prepare_unix_socket(path: Path, access: str = "user") -> None:
    dir_mode = SOCKET_ACCESS[access][0]
    if not path.parent.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as err:
            raise ListenError(
                f"cannot create {path.parent} for unix://{path}: {err.strerror}; "
                "choose another --listen unix:///PATH or set TRAINPROBE_RUNTIME_DIR"
            ) from None
    if not path.parent.is_symlink() and not path.parent.is_dir():
        # A mistake in the path, not a directory another user controls: exit 1.
        raise ListenError(
            f"cannot listen on unix://{path}: {path.parent} is not a directory; choose "
            "another --listen unix:///PATH or set TRAINPROBE_RUNTIME_DIR"
        )
    # Checked after mkdir: another user may have made it first (mkdir then
    # leaves theirs in place).
    problem = socket_dir_problem(path.parent)
    if problem is not None and _tighten(path.parent):
        problem = socket_dir_problem(path.parent)
    if problem is not None:
        raise UnsafeListenDir(
            f"refusing to listen on unix://{path}: {problem}; choose another --listen "
            "unix:///PATH or set TRAINPROBE_RUNTIME_DIR"
        )
    _open_for(path.parent, dir_mode)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ListenError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(0.5)
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale socket of a sidecar that died
        else:
            raise ListenError(f"another sidecar is already listening on {path}")
        finally:
            probe.close()


def _tighten(directory: Path) -> bool:
    """Take write access from group and others on a directory of our own.

    Ours to fix, not to refuse (a root sidecar's emptyDir is its own too; a
    non-root one never gets here for a root-owned one: it uses its own
    ``trainprobe-<uid>`` inside it). Any other user's directory, or a
    symlink, is left alone (and refused).
    """
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False
    mode = stat.S_IMODE(st.st_mode)
    os.chmod(directory, mode & ~0o022)
    log.warning(
        "%s was writable by others (mode %04o); made it %04o", directory, mode, mode & ~0o022
    )
    return True


def _open_for(directory: Path, dir_mode: int) -> None:
    """Give the directory (ours) the search bits ``socket_access`` needs."""
    st = os.lstat(directory)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == os.geteuid() and mode & dir_mode != dir_mode:
        os.chmod(directory, mode | dir_mode)


@dataclass
class Servers:
    """What :func:`open_servers` started: servers, their addresses, socket files."""

    servers: list[grpc.aio.Server] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    unix_paths: list[Path] = field(default_factory=list)


async def open_servers(
    listen: Sequence[str],
    token: str | None,
    insecure: bool,
    handlers: Sequence[grpc.GenericRpcHandler],
    tickets: TicketDesk | None = None,
    access: str = "user",
    tls: grpc.ServerCredentials | None = None,
) -> Servers:
    """Serve ``handlers`` on every address: Unix sockets plain, TCP behind the
    token (and over TLS with ``tls``, see :func:`server_tls`); ``tickets``
    serves an identity socket beside each Unix socket. ``access`` (a
    :data:`SOCKET_ACCESS` key) says who may connect to them."""
    sock_mode = SOCKET_ACCESS[access][1]
    out = Servers()
    plain = grpc.aio.server(options=SERVER_OPTIONS)
    plain.add_generic_rpc_handlers(tuple(handlers))
    secured: grpc.aio.Server | None = None
    for text in listen:
        asked = parse_endpoint(text)
        ep = resolve_socket(asked)
        if ep.kind == "unix":
            path = Path(ep.path)
            if ep != asked:
                log.info(
                    "%s is shared (root's, writable by anyone: a Kubernetes emptyDir or /tmp); "
                    "listening on %s, this user's own directory in it, where hooks aimed at %s "
                    "look too",
                    Path(asked.path).parent,
                    ep,
                    asked,
                )
            prepare_unix_socket(path, access)
            check_unix_bind(path)  # gRPC would only log "Failed to add port"
            try:
                plain.add_insecure_port(ep.grpc_target)
            except RuntimeError as err:
                raise ListenError(f"cannot listen on {ep}: {err}") from None
            out.unix_paths.append(path)
            out.addresses.append(str(ep))
            continue
        if not token and not insecure:
            raise ListenError(f"{ep}: TCP needs a token (or insecure=True)")
        server = plain
        if token:
            if secured is None:
                secured = grpc.aio.server(
                    options=SERVER_OPTIONS, interceptors=[TokenInterceptor(token)]
                )
                secured.add_generic_rpc_handlers(tuple(handlers))
            server = secured
        check_tcp_bind(ep.host, ep.port)  # gRPC would only log "Failed to bind"
        try:
            if tls is None:
                port = server.add_insecure_port(ep.grpc_target)
            else:
                port = server.add_secure_port(ep.grpc_target, tls)
        except RuntimeError as err:
            raise ListenError(f"cannot listen on {ep}: {err}") from None
        out.addresses.append(f"tcp://{ep.host}:{port}")
    out.servers = [s for s in (plain, secured) if s is not None]
    for server in out.servers:
        await server.start()
    for path in out.unix_paths:
        os.chmod(path, sock_mode)
        ident = ident_socket_path(str(path)) if tickets is not None else ""
        if ident:
            try:
                await tickets.listen(Path(ident), sock_mode)  # type: ignore[union-attr]
            except OSError as err:
                raise ListenError(f"cannot serve the identity socket {ident}: {err}") from None
        elif tickets is not None:
            log.warning(
                "%s: no room for an identity socket beside it (sun_path is 107 bytes): its "
                "workers stay unverified and are never signalled; use a shorter path",
                path,
            )
    return out


def server_tls(cert_file: Path | None, key_file: Path | None) -> grpc.ServerCredentials | None:
    """The TLS credentials TCP listeners serve with (None: plain TCP).

    The files were checked when the settings were loaded (config/tls.py);
    read again here, so a certificate renewed in place is used on restart.
    """
    if cert_file is None or key_file is None:
        return None
    cert = read_pem(cert_file, "tls_cert_file")
    key = read_pem(key_file, "tls_key_file", private=True)
    return grpc.ssl_server_credentials([(key, cert)])


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
