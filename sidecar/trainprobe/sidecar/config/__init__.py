"""Configuration: every option declared once (:mod:`.options`), its value
parsers (:mod:`.parsers`), and the one typed :class:`Settings` built from
TOML < ``TRAINPROBE_*`` environment < flags (:mod:`.settings`).

Pure: no gRPC, Ray or OpenTelemetry.
"""

from trainprobe.sidecar.config.options import ENV_PREFIX, OPTIONS, OPTIONS_BY_NAME, Option
from trainprobe.sidecar.config.settings import (
    Settings,
    SettingsError,
    defaults,
    load_settings,
    render_markdown,
)

__all__ = [
    "ENV_PREFIX",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "Option",
    "Settings",
    "SettingsError",
    "defaults",
    "load_settings",
    "render_markdown",
]
