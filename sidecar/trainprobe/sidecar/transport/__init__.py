"""gRPC in: the servicer that turns streams into registry updates, commands
out to workers, protobuf <-> core data conversion, the kubelet's health
service; ``listen/``: listening sockets, bearer-token auth and identity tickets.

Public API (imported on first use):

- :class:`SidecarServicer`: the ``trainprobe.v1.Sidecar`` service.
- :class:`Commander`: commands to workers over their streams, and their results.
- :func:`open_servers`, :class:`ListenError`: Unix (0600) and TCP listeners.
- :class:`TokenInterceptor`: the TCP listeners' bearer-token check.
- :class:`Health`: the standard ``grpc.health.v1.Health`` service (kubelet
  probes), answered without a token.
- :mod:`.pb`: ``hello_from_pb``, ``report_from_pb``, ``status_pb``.
"""

from trainprobe.sidecar.core.lazy import lazy_exports

__all__ = [
    "Commander",
    "Health",
    "ListenError",
    "SidecarServicer",
    "TokenInterceptor",
    "open_servers",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Commander": "commander",
        "Health": "health",
        "ListenError": "listen.sockets",
        "open_servers": "listen.sockets",
        "SidecarServicer": "servicer",
        "TokenInterceptor": "listen.auth",
    },
)
