"""Value parsers for settings: each turns a raw value into a typed one.

A raw value is a string (environment, command line) or a TOML value. A parser
raises ValueError saying what it accepts; the loader adds the key's name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainprobe.proto import EndpointError, parse_endpoint


def number(lo: float, hi: float, what: str = "a number") -> Callable[[Any], float]:
    def parse(v: Any) -> float:
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = float("nan")
        if isinstance(v, bool) or not lo <= x <= hi:
            raise ValueError(f"must be {what} in {lo:g}..{hi:g}")
        return x

    return parse


def seconds(lo: float, hi: float) -> Callable[[Any], float]:
    return number(lo, hi, "a number of seconds")


def auto_or_seconds(lo: float, hi: float) -> Callable[[Any], float | None]:
    in_range = seconds(lo, hi)

    def parse(v: Any) -> float | None:
        if isinstance(v, str) and v.strip().lower() == "auto":
            return None
        try:
            return in_range(v)
        except ValueError:
            raise ValueError(f"must be 'auto' or a number of seconds in {lo:g}..{hi:g}") from None

    return parse


def integer(lo: int, hi: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        try:
            x = int(str(v).strip())
        except ValueError:
            raise ValueError(f"must be a whole number in {lo}..{hi}") from None
        if isinstance(v, bool) or not lo <= x <= hi:
            raise ValueError(f"must be a whole number in {lo}..{hi}")
        return x

    return parse


def optional_port(v: Any) -> int | None:
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "off")):
        return None
    return integer(0, 65535)(v)


def ratio(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = float("nan")
    if not 0.0 < x <= 1.0:
        raise ValueError("must be a fraction in (0, 1]")
    return x


def choice(*values: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        s = str(v).strip().lower()
        if s not in values:
            raise ValueError(f"must be one of {', '.join(values)}")
        return s

    return parse


def boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def optional_text(v: Any) -> str | None:
    s = "" if v is None else str(v).strip()
    return s or None


def tool(v: Any) -> str:
    """``auto``, ``off``, or the path of an executable."""
    s = "" if v is None else str(v).strip()
    if s.lower() in ("", "off", "none", "false", "0"):
        return "off"
    return "auto" if s.lower() == "auto" else s


def path(v: Any) -> Path:
    s = str(v).strip()
    if not s:
        raise ValueError("must be a path")
    return Path(s).expanduser()


def otlp_endpoint(v: Any) -> str | None:
    s = "" if v is None else str(v).strip()
    if s.lower() in ("", "none", "off"):
        return None
    scheme, sep, rest = s.partition("://")
    if not sep:
        scheme, rest = "", s
    host, colon, port = rest.rstrip("/").rpartition(":")
    if scheme not in ("", "http", "https") or not colon or not host or not port.isdigit():
        raise ValueError(
            "must be http://HOST:PORT (plaintext), https://HOST:PORT or HOST:PORT (TLS), or none"
        )
    return s


def host(v: Any) -> str:
    s = "" if v is None else str(v).strip()
    try:
        return str(ipaddress.ip_address(s.strip("[]")))
    except ValueError:
        pass
    if not s or not all(c.isalnum() or c in ".-" for c in s):
        raise ValueError("must be a host name or IP address, e.g. 0.0.0.0 or 127.0.0.1")
    return s


def optional_path(v: Any) -> Path | None:
    return None if v is None or str(v).strip() == "" else path(v)


def endpoints(v: Any) -> tuple[str, ...]:
    items = v if isinstance(v, (list, tuple)) else str(v).split(",")
    out = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        try:
            out.append(str(parse_endpoint(text)))
        except EndpointError as err:
            raise ValueError(str(err)) from None
    if not out:
        raise ValueError("needs at least one address")
    return tuple(out)


def optional_endpoint(v: Any) -> str | None:
    """One address (unix:///path or tcp://host:port), or none."""
    text = "" if v is None else str(v).strip()
    if text.lower() in ("", "none"):
        return None
    try:
        return str(parse_endpoint(text))
    except EndpointError as err:
        raise ValueError(str(err)) from None
