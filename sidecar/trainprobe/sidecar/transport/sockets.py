"""Listening: Unix sockets guarded by file permissions, TCP by a bearer token.

Unix listeners get a 0600 socket in a 0700 directory. TCP listeners live on
a second server whose interceptor checks the bearer token, since an
interceptor cannot tell which port a call came in on.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from trainprobe.proto import MESSAGE_SIZE_OPTIONS, parse_endpoint, socket_dir_problem
from trainprobe.sidecar.transport.auth import TokenInterceptor

log = logging.getLogger("trainprobe.sidecar")

SERVER_OPTIONS = [*MESSAGE_SIZE_OPTIONS, ("grpc.so_reuseport", 0)]


class ListenError(RuntimeError):
    """A listen address that cannot be served."""


def prepare_unix_socket(path: Path) -> None:
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Checked after mkdir: another user may have made it first (mkdir then
    # leaves theirs in place).
    problem = socket_dir_problem(path.parent)
    if problem is not None and _tighten(path.parent):
        problem = socket_dir_problem(path.parent)
    if problem is not None:
        raise ListenError(f"refusing to listen on {path}: {problem}")
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

    A Kubernetes emptyDir shared by the sidecar and training containers is
    created 0777 and owned by the pod's user: ours to fix, not to refuse. Any
    other user's directory, or a symlink, is left alone (and refused).
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
) -> Servers:
    """Serve ``handlers`` on every address: Unix sockets plain, TCP behind the token."""
    out = Servers()
    plain = grpc.aio.server(options=SERVER_OPTIONS)
    plain.add_generic_rpc_handlers(tuple(handlers))
    secured: grpc.aio.Server | None = None
    for text in listen:
        ep = parse_endpoint(text)
        if ep.kind == "unix":
            path = Path(ep.path)
            prepare_unix_socket(path)
            plain.add_insecure_port(ep.grpc_target)
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
        try:
            port = server.add_insecure_port(ep.grpc_target)
        except RuntimeError as err:
            raise ListenError(f"cannot listen on {ep}: {err}") from None
        out.addresses.append(f"tcp://{ep.host}:{port}")
    out.servers = [s for s in (plain, secured) if s is not None]
    for server in out.servers:
        await server.start()
    for path in out.unix_paths:
        os.chmod(path, 0o600)
    return out
