"""How a stream's first message becomes a session, or a refusal.

The first message must be a well-formed Hello. Its pid is trusted only
through the kernel: a direct stream's identity ticket is redeemed at the
:class:`~trainprobe.sidecar.transport.listen.identity.TicketDesk` (SO_PEERCRED), a
relayed one is vouched for by the node that carried it, and a ticket not
issued to the Hello's pid leaves the session unverified, never signalled.
The registry then applies the session rule; every refusal comes back as the
gRPC status the stream ends with. Connect streams and relayed streams open
sessions the same way (:meth:`SidecarServicer.open_session
<trainprobe.sidecar.transport.servicer.SidecarServicer.open_session>`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc

from trainprobe.sidecar.act.procs import mono_ahead_ns
from trainprobe.sidecar.core.session.model import VerifiedProcess, WorkerState
from trainprobe.sidecar.core.session.registry import Registry, RegistryError
from trainprobe.sidecar.transport import pb
from trainprobe.sidecar.transport.listen.identity import TicketDesk
from trainprobe.sidecar.transport.streams import Malformed

__all__ = ["Refusal", "node_stream_refusal", "open_session", "verify_hello"]

log = logging.getLogger("trainprobe.sidecar")

#: The status a refused stream gets.
Refusal = tuple[grpc.StatusCode, str]


def open_session(
    registry: Registry,
    tickets: TicketDesk | None,
    clock: Callable[[], float],
    first: Any,
    relay: Any,
    vouched: VerifiedProcess | None = None,
    node: object | None = None,
    unix: bool = False,
) -> tuple[WorkerState | None, Refusal | None]:
    """Open a session from a stream's first message (Connect, or relayed when
    ``relay`` names the relay route); on refusal, the status to send.

    A relayed Hello is verified only by its ``node`` (the Relay stream that
    carried it), which ``vouched`` for the pid it verified on its host.
    ``unix``: a Connect on a Unix socket. Where those are open to other users
    (``--socket-access group``/``all``), an unverified one is refused: its uid
    is unknown, and a rank that reports counts as running in its job, so another
    user's process could make a job of ranks it cannot signal look not paused
    (core/session/session_rule.py's ``other_uid`` binds verified ones).
    """
    if isinstance(first, Malformed):
        return None, (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"malformed WorkerMessage: {first.error}",
        )
    if first.WhichOneof("body") != "hello":
        return None, (
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the first message must be a Hello, got {first.WhichOneof('body') or 'nothing'}",
        )
    verified = verify_hello(tickets, first.hello) if relay is None else vouched
    if verified is None and unix and relay is None and tickets is not None and tickets.shared:
        return None, (
            grpc.StatusCode.PERMISSION_DENIED,
            f"pid {first.hello.pid}: this socket is open to other users (--socket-access), "
            "so a worker needs the identity ticket of its own pid (a hook older than "
            "the sidecar, or a PID namespace the sidecar cannot see, has none)",
        )
    if verified is not None and verified.pid != first.hello.pid:
        return None, (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the relaying node vouched for pid {verified.pid}, the Hello names "
            f"pid {first.hello.pid}",
        )
    try:
        state = registry.open(pb.hello_from_pb(first.hello), clock(), verified, node)
    except RegistryError as err:
        return None, (getattr(grpc.StatusCode, err.code), str(err))
    # Only the kernel's word makes a process ours to signal; a relayed worker
    # is its node's to signal (the node verified it or refuses to).
    registry.set_route(state, relay)
    log.info(
        "worker %s connected%s: pid %d%s on %s, world size %d",
        state.key,
        "" if relay is None else f" via relay {relay}",
        state.hello.pid,
        (
            " (unverified)"
            if not state.verified
            else f" (verified, uid {state.uid})"
            if relay is None
            else " (verified by its node)"
        ),
        state.hello.host,
        state.hello.world_size,
    )
    return state, None


def verify_hello(tickets: TicketDesk | None, hello: Any) -> VerifiedProcess | None:
    """The process the kernel named for this Hello's ticket, if it is the
    Hello's pid; None (an unverified session) otherwise."""
    if tickets is None or not hello.identity_ticket:
        return None
    peer = tickets.redeem(hello.identity_ticket, hello.pid)
    if peer is None:
        log.warning(
            "worker pid %d sent an identity ticket that was not issued to it (or is spent "
            "or expired): unverified, never signalled",
            hello.pid,
        )
        return None
    return VerifiedProcess(peer.pid, peer.uid, peer.start_ticks, mono_ahead_ns(peer.pid))


def node_stream_refusal(peer: str, tickets: TicketDesk | None, rpc: str) -> Refusal | None:
    """Why a node's stream (``Relay``, ``JobSync``) from ``peer`` is refused, if it is.

    Such a stream speaks for ranks that no kernel check here binds to a uid (a
    Relay stream vouches for its node's pids; a JobSync stream uploads its
    node's summaries), and gRPC's Unix socket does not say who connected. On a
    socket open to other users (``--socket-access group``/``all``) another
    user's process could otherwise vouch for a made-up rank that reports in a
    job of ranks it cannot signal, and make their whole-job pause a kill.
    Nodes come over TCP, where the token says who they are.
    """
    if tickets is None or not tickets.shared or not peer.startswith("unix:"):
        return None
    return (
        grpc.StatusCode.PERMISSION_DENIED,
        f"{rpc} is refused on a Unix socket open to other users (--socket-access): "
        "a node's stream speaks for ranks whose uid no one checked; connect the node "
        "over TCP with the token, or to a socket of the sidecar's own uid",
    )
