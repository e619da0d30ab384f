"""Verified identity: the kernel's word for a worker's pid, as a single-use ticket.

The sidecar's side of :mod:`trainprobe.proto.identity`. An identity socket
beside each gRPC Unix socket (same directory, mode 0600) answers every
connection with a fresh ticket bound to the peer the kernel names
(``SO_PEERCRED``: pid, uid, gid) and to that pid's start time in ``/proc``.
It reads nothing from the client, so a client controls nothing it could
block on; each answer is written with a short timeout. :meth:`TicketDesk.redeem`
takes a Hello's ticket and claimed pid and returns the verified peer only if
the ticket is live, unused, issued to that very pid, and the process with
that pid is still the one that asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainprobe.proto.identity import TICKET_BYTES, TICKET_MAGIC
from trainprobe.sidecar.act.procs import proc_start_ticks

__all__ = ["Peer", "TicketDesk"]

log = logging.getLogger("trainprobe.sidecar")

#: How long a ticket stays redeemable: the hook sends its Hello right after.
TICKET_TTL_S = 30.0
#: Most tickets outstanding at once (the oldest is dropped beyond it).
MAX_TICKETS = 4096
#: Longest a client may take to receive its ticket.
ANSWER_TIMEOUT_S = 1.0
_UCRED = struct.Struct("3i")


@dataclass(frozen=True)
class Peer:
    """A process the kernel named: pid (in this sidecar's PID namespace), uid,
    gid, and the pid's start time, which pins it against pid reuse."""

    pid: int
    uid: int
    gid: int
    start_ticks: int | None


class TicketDesk:
    """Issues tickets on identity sockets; redeems each at most once."""

    def __init__(self, ttl_s: float = TICKET_TTL_S, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self._clock = clock
        #: ticket -> (peer, issued at), oldest first.
        self._tickets: OrderedDict[bytes, tuple[Peer, float]] = OrderedDict()
        #: pid -> its one outstanding ticket: a process flooding the socket
        #: holds one slot, not MAX_TICKETS.
        self._by_pid: dict[int, bytes] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self.paths: list[Path] = []
        #: Whether a socket is open to other users (``--socket-access``): then a
        #: Connect on it must be verified (transport/session_open.py).
        self.shared = False

    def issue(self, peer: Peer) -> bytes:
        old = self._by_pid.pop(peer.pid, None)
        if old is not None:
            self._tickets.pop(old, None)
        ticket = secrets.token_bytes(TICKET_BYTES)
        self._tickets[ticket] = (peer, self._clock())
        self._by_pid[peer.pid] = ticket
        while len(self._tickets) > MAX_TICKETS:
            _, (dropped, _) = self._tickets.popitem(last=False)
            if self._by_pid.get(dropped.pid) is not None:
                self._by_pid.pop(dropped.pid, None)
        return ticket

    def redeem(self, ticket: bytes, claimed_pid: int) -> Peer | None:
        """The verified peer if ``ticket`` was issued to ``claimed_pid`` and that
        process still runs; None otherwise. The ticket is spent either way."""
        if len(ticket) != TICKET_BYTES:
            return None
        # A dict lookup, not a constant-time scan: what its timing could leak is
        # a hash bucket of a 128-bit random key, never a usable prefix.
        entry = self._tickets.pop(ticket, None)
        if entry is None:
            return None
        peer, issued_at = entry
        if self._by_pid.get(peer.pid) == ticket:
            del self._by_pid[peer.pid]
        if self._clock() - issued_at > self.ttl_s or peer.pid != claimed_pid:
            return None
        if peer.start_ticks is None or proc_start_ticks(peer.pid) != peer.start_ticks:
            return None  # the process that asked is gone (its pid may be reused)
        return peer

    # -- the identity sockets ----------------------------------------------------

    async def listen(self, path: Path, mode: int = 0o600) -> None:
        """Serve tickets on ``path`` (``mode``, the gRPC socket's, in its directory)."""
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                path.unlink()  # a stale one: the gRPC socket beside it was checked first
        server = await asyncio.start_unix_server(self._answer, path=str(path))
        os.chmod(path, mode)
        self.shared = self.shared or bool(mode & 0o077)
        self._servers.append(server)
        self.paths.append(path)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sock = writer.get_extra_info("socket")
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            pid, uid, gid = _UCRED.unpack(raw)
            if pid > 0:  # 0: a process in a PID namespace we cannot see
                ticket = self.issue(Peer(pid, uid, gid, proc_start_ticks(pid)))
                writer.write(TICKET_MAGIC + ticket)
                await asyncio.wait_for(writer.drain(), ANSWER_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as err:
            log.debug("identity socket: %s", err)
        finally:
            writer.close()

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._servers.clear()
        self.paths.clear()
