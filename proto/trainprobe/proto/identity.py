"""The identity handshake both ends share: how a worker proves its pid.

gRPC does not tell a server who is on the other end of a Unix socket, so a
sidecar also listens on a plain Unix socket next to its gRPC one: the gRPC
socket's path plus :data:`IDENT_SUFFIX`. The worker connects and sends
nothing; the sidecar reads the peer's pid, uid and gid from the kernel
(``SO_PEERCRED``), answers :data:`TICKET_MAGIC` plus a random single-use
ticket bound to that pid, and closes. The worker's Hello carries the ticket
(``Hello.identity_ticket``); the sidecar believes the Hello's pid only if the
ticket was issued to that pid.

:func:`fetch_ticket` is the worker's side. It never raises: without a
ticket (a TCP target, an older sidecar without the socket) the session is
simply unverified, and the sidecar then never signals the process.
"""

from __future__ import annotations

import socket

from trainprobe.proto.endpoints import EndpointError, parse_endpoint

__all__ = [
    "IDENT_SUFFIX",
    "TICKET_BYTES",
    "TICKET_MAGIC",
    "TICKET_TIMEOUT_S",
    "fetch_ticket",
    "ident_socket_path",
]

#: Appended to a gRPC Unix socket's path to name its identity socket.
IDENT_SUFFIX = ".id"
#: What every answer starts with (a version, so the format can change).
TICKET_MAGIC = b"TPID1:"
#: Random bytes in a ticket.
TICKET_BYTES = 16
#: Most bytes a worker reads from the identity socket.
_MAX_ANSWER = len(TICKET_MAGIC) + TICKET_BYTES
#: Unix socket paths are limited to 107 bytes by sun_path.
_MAX_UNIX_PATH = 107


def ident_socket_path(socket_path: str) -> str:
    """The identity socket beside the gRPC Unix socket ``socket_path``; "" when
    that name would not fit in sun_path."""
    path = socket_path + IDENT_SUFFIX
    return path if len(path.encode()) <= _MAX_UNIX_PATH else ""


#: How long the hook waits for a ticket. Generous: without one the whole session
#: is unverified (no evidence from /proc, no signal: a hang is only asked to
#: abort). The fault matrix at load 50 saw a 1 s wait run out once in 640 jobs.
TICKET_TIMEOUT_S = 5.0


def fetch_ticket(target: str, timeout_s: float = TICKET_TIMEOUT_S) -> bytes:
    """A ticket from the sidecar at ``target``; b"" if there is none to be had.

    Only Unix targets have an identity socket: a TCP worker's pid names
    nothing the sidecar can verify. Plain blocking calls with a timeout, for
    the hook's reporter thread (never the training thread): a local
    round trip of a few syscalls that release the GIL, where an asyncio
    version needs several turns of the reporter's loop, each of which waits
    for the GIL while training holds it (tens of ms under load).
    """
    try:
        ep = parse_endpoint(target)
    except EndpointError:
        return b""
    path = ident_socket_path(ep.path) if ep.kind == "unix" else ""
    if not path:
        return b""
    answer = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            while len(answer) < _MAX_ANSWER:
                chunk = sock.recv(_MAX_ANSWER - len(answer))
                if not chunk:
                    break
                answer += chunk
    except OSError:  # no such socket (an older sidecar), refused, timed out
        return b""
    if not answer.startswith(TICKET_MAGIC) or len(answer) != _MAX_ANSWER:
        return b""
    return answer[len(TICKET_MAGIC) :]
