"""Listening, and who may connect: Unix sockets (0600 in a 0700 directory, the
directory and file made safe first), TCP behind a bearer token, the identity
socket beside each Unix socket that hands out the kernel's word for a pid as
a ticket, and the one-line reason an address cannot be bound.

Public API (imported on first use):

- :func:`open_servers`, :class:`ListenError`: the sidecar's listeners.
- :class:`TokenInterceptor`: the TCP listeners' bearer-token check.
- :class:`TicketDesk`: identity tickets (SO_PEERCRED), redeemed by a stream's
  first message.

It imports nothing else of ``transport/``.
"""

from trainprobe.sidecar.core.lazy import lazy_exports

__all__ = ["ListenError", "TicketDesk", "TokenInterceptor", "open_servers"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ListenError": "listen_checks",
        "TicketDesk": "identity",
        "TokenInterceptor": "auth",
        "open_servers": "sockets",
    },
)
