"""The argument parser of every command: a mistake is one line, with a suggestion.

argparse answers a mistyped flag with the whole usage (38 lines for
``trainprobe-sidecar``) and no hint. :class:`Parser` answers it with one line
that names the flag and the nearest real one (``core.text.did_you_mean``, as
the settings file and environment do), or points to
``--help`` when none is near, and exits 2, as argparse does. Subcommands'
parsers are made by their parent, so they are Parsers too, and a flag is
matched against the flags of the subcommand given.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from trainprobe.sidecar.core.text import did_you_mean, printable_lines

__all__ = ["Parser"]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, an unknown flag's with a
    suggestion."""

    #: Words a user may try as a choice that name something else: the hint for each.
    elsewhere: dict[str, str] = {}

    def error(self, message: str) -> NoReturn:
        # The message quotes argv, which a script may have filled with anything.
        self.exit(2, f"{self.prog}: error: {printable_lines(message)}\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(ns)._unknown(extras)
        return ns

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as err:
            # (Python 3.14's suggest_on_error may have added its own hint.)
            if action.choices is None or not isinstance(value, str) or "meant" in err.message:
                raise
            hint = self.elsewhere.get(value) or did_you_mean(
                value, (str(c) for c in action.choices)
            )
            raise argparse.ArgumentError(action, f"{err.message}{hint}") from None

    def _chosen(self, ns: argparse.Namespace) -> Parser:
        """The innermost subcommand's parser that ``ns`` names (else this one)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(ns, action.dest, None) or "")
                if isinstance(sub, Parser):
                    return sub._chosen(ns)
        return self

    def _unknown(self, extras: list[str]) -> NoReturn:
        flag = next((a for a in extras if a.startswith("-") and a != "-"), "")
        if flag:
            name = flag.split("=", 1)[0]
            hint = did_you_mean(name, self._option_string_actions)
            if not hint:
                hint = f" (see {self.prog} --help)"
            self.error(f"unknown flag {name}{hint}")
        self.error(f"unexpected argument {extras[0]!r} (see {self.prog} --help)")
