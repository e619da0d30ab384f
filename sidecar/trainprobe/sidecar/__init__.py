"""The per-node sidecar: receives hook reports, judges them, acts.

Public API:

- :class:`Settings`, :func:`load_settings`: configuration (file < env < flags).
- :class:`Sidecar`: the assembled service, for use inside an asyncio loop.
- :class:`SidecarThread`: a sidecar on its own thread (embedding, tests).
- :mod:`trainprobe.sidecar.core`: the pure decision logic.
"""

from trainprobe.sidecar.server import SIDECAR_VERSION, ListenError, Sidecar
from trainprobe.sidecar.settings import OPTIONS, Settings, SettingsError, load_settings
from trainprobe.sidecar.threaded import SidecarThread

__version__ = SIDECAR_VERSION

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
