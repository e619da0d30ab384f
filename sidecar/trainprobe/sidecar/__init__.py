"""The per-node sidecar: receives hook reports, judges them, acts.

Public API (imported on first use, so ``import trainprobe.sidecar`` is cheap
and :mod:`trainprobe.sidecar.core` imports without gRPC, Ray or OpenTelemetry):

- :class:`Settings`, :func:`load_settings`: configuration (file < env < flags).
- :class:`Sidecar`: the assembled service, for use inside an asyncio loop.
- :class:`SidecarThread`: a sidecar on its own thread (embedding, tests).
- :mod:`trainprobe.sidecar.core`: the pure decision logic.

Layout: ``core/`` (pure rules and decisions), ``engine/`` (the tick and the
hang path), ``config/``, ``transport/`` (gRPC in), ``act/`` (kills, stacks,
the incident log), ``relay/``, ``otel/``, ``ray/``, ``cli/``; ``server.py``
assembles them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainprobe.sidecar.core.lazy import lazy_exports

if TYPE_CHECKING:
    from trainprobe.sidecar.config.settings import OPTIONS, Settings, SettingsError, load_settings
    from trainprobe.sidecar.server import SIDECAR_VERSION, Sidecar
    from trainprobe.sidecar.threaded import SidecarThread
    from trainprobe.sidecar.transport.listen.sockets import ListenError

__all__ = [
    "OPTIONS",
    "SIDECAR_VERSION",
    "ListenError",
    "Settings",
    "SettingsError",
    "Sidecar",
    "SidecarThread",
    "load_settings",
]

_exported, __dir__ = lazy_exports(
    __name__,
    {
        "OPTIONS": "config.settings",
        "SIDECAR_VERSION": "server",
        "ListenError": "transport.listen.sockets",
        "Settings": "config.settings",
        "SettingsError": "config.settings",
        "Sidecar": "server",
        "SidecarThread": "threaded",
        "load_settings": "config.settings",
    },
)


def __getattr__(name: str) -> Any:
    # ``__version__`` is the wire contract's, read on first use: importing the
    # pure core (which runs this package first) must not load protobuf.
    if name == "__version__":
        from trainprobe.proto import VERSION

        return VERSION
    return _exported(name)
