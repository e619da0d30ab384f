"""Client strings made safe to show: the one escaping function of the sidecar and CLIs.

A job id, host, phase name or stack frame comes from a client, and a client
can put an ANSI escape, a BEL or a newline in it (to recolour a terminal,
forge a table row or a log line). :func:`printable` replaces every control
character (C0, DEL, C1) and the invisible Unicode format characters that
reorder or hide text (bidi overrides, zero-width, line and paragraph
separators) by a visible escape, so what reaches a terminal, a table, rich
text or a log line is exactly one line of visible characters. JSON output
needs no such step: :func:`json.dumps` escapes them itself.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Sequence

__all__ = [
    "SafeLogFormatter",
    "configure_logging",
    "did_you_mean",
    "printable",
    "printable_lines",
    "sentences",
    "short_list",
]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: As :data:`_UNSAFE`, less the newline and tab of a table or a JSON document.
_UNSAFE_IN_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(value: object) -> str:
    """``value`` as one line of visible text: control and format characters escaped."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text)


def printable_lines(text: str) -> str:
    """``text`` with every control and format character escaped but its newlines
    and tabs: what a CLI may write as a whole (a table, indented JSON)."""
    return _UNSAFE_IN_LINES.sub(_escape, text)


class SafeLogFormatter(logging.Formatter):
    """Escapes every string argument of a record, so a client's text cannot
    start a forged log line or reach the operator's terminal as an escape.
    Our own format strings are left as they are."""

    def format(self, record: logging.LogRecord) -> str:
        args = record.args
        if isinstance(args, tuple) and args:
            record.args = tuple(_safe_arg(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _safe_arg(v) for k, v in args.items()}
        try:
            return super().format(record)
        finally:
            record.args = args


#: Items of a list or tuple a log line shows; the rest are counted. An incident
#: over every rank of a 10,000-rank job made each of its lines 60 KB.
LOG_LIST_ITEMS = 32
#: Per-rank sentences a diagnosis's text gives; the rest are counted (its
#: fields list every rank). Over 3,000 silent ranks the text was 220 KB.
TEXT_SENTENCES = 8


def short_list(items: Sequence[object], limit: int = LOG_LIST_ITEMS) -> str:
    """``[a, b, ...]``, or its first ``limit`` items and how many more."""
    if len(items) <= limit:
        return repr(list(items))
    shown = ", ".join(repr(x) for x in items[:limit])
    return f"[{shown}, ... {len(items) - limit:,} more]"


def sentences(parts: Sequence[str], limit: int = TEXT_SENTENCES, total: int = 0) -> str:
    """Per-rank sentences joined by "; ", the first ``limit`` of them and a count
    (of ``total`` ranks, where only the first sentences were built)."""
    total = max(total, len(parts))
    if total <= limit:
        return "; ".join(parts)
    return "; ".join(parts[:limit]) + f"; and {total - limit:,} more ranks likewise"


def _safe_arg(arg: object) -> object:
    # Anything but a number may carry a client's text (a worker key, an exception's
    # message, a list of hosts); numbers stay numbers for %d and %.2f.
    if arg is None or isinstance(arg, (int, float)):
        return arg
    if isinstance(arg, (list, tuple)) and len(arg) > LOG_LIST_ITEMS:
        return printable(short_list(arg))
    return printable(arg)


def configure_logging(level: str) -> None:
    """The sidecar's root logging: :data:`LOG_FORMAT` through :class:`SafeLogFormatter`."""
    handler = logging.StreamHandler()
    handler.setFormatter(SafeLogFormatter(LOG_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the candidate nearest ``word``, or "" if none
    is near: the one hint of a mistyped flag, setting or subcommand."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
