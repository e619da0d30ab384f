"""Listening: Unix sockets guarded by file permissions, TCP by a bearer token.

Unix listeners get a 0600 socket in a 0700 directory (wider only as
``socket_access`` asks, for workers of another uid), and beside it the
identity socket that hands out tickets (:mod:`trainprobe.sidecar.transport.listen.identity`).
A socket asked for in a shared directory (root's, writable by anyone: a
kubelet's emptyDir) goes into this user's own ``trainprobe-<uid>`` inside it,
where hooks aimed at the same path look too (:func:`trainprobe.proto.resolve_socket`);
``socket_files.py`` makes the directory and the file safe first.
TCP listeners live on a second server whose interceptor checks the bearer
token, since an interceptor cannot tell which port a call came in on.
Every address is bound once by ``listen_checks.py`` before gRPC tries, so a
listener that cannot be had stops the start with one line that says why.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from trainprobe.proto import (
    MESSAGE_SIZE_OPTIONS,
    ident_socket_path,
    parse_endpoint,
    resolve_socket,
)
from trainprobe.sidecar.config.tls import read_pem
from trainprobe.sidecar.core.limits import MAX_SESSIONS
from trainprobe.sidecar.transport.listen.auth import TokenInterceptor
from trainprobe.sidecar.transport.listen.identity import TicketDesk
from trainprobe.sidecar.transport.listen.listen_checks import (
    ListenError,
    check_tcp_bind,
    check_unix_bind,
)
from trainprobe.sidecar.transport.listen.socket_files import SOCKET_ACCESS, prepare_unix_socket

__all__ = [
    "PENDING_CALLS",
    "PENDING_CALL_WAIT_S",
    "SERVER_OPTIONS",
    "ListenError",
    "Servers",
    "open_servers",
    "server_tls",
]

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
