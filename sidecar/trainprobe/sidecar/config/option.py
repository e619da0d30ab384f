"""One sidecar option's declaration, and the sections the table groups them in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ACTIONS_SECTION", "ENV_PREFIX", "INTEGRATIONS", "RELAY", "RULES", "SERVING", "Option"]

ENV_PREFIX = "TRAINPROBE_"


@dataclass(frozen=True)
class Option:
    name: str
    parse: Callable[[Any], Any]
    doc: str
    section: str
    #: Shown in docs when the default is computed at run time.
    default_text: str = ""
    repeatable: bool = False
    secret: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


SERVING, RULES, ACTIONS_SECTION, INTEGRATIONS, RELAY = (
    "Serving",
    "Rules",
    "Actions",
    "Integrations",
    "Relay",
)
