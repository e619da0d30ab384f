"""Conventions both ends of a gRPC connection share, without importing gRPC."""

from __future__ import annotations

from importlib import metadata

# Facts the sidecar's pure core judges by are declared there (standard library
# only) and re-exported here: one source for each.
from trainprobe.sidecar.core.conventions import (
    INIT_PHASE,
    RENDEZVOUS_PHASE,
    STACK_SIGNALS,
    STARTUP_PHASES,
    RayIds,
)

__all__ = [
    "AUTH_METADATA_KEY",
    "INIT_PHASE",
    "MAX_MESSAGE_BYTES",
    "MESSAGE_SIZE_OPTIONS",
    "RENDEZVOUS_PHASE",
    "STACK_SIGNALS",
    "STARTUP_PHASES",
    "VERSION",
    "RayIds",
    "bearer_metadata",
    "bearer_value",
    "package_version",
]

#: gRPC metadata key carrying the bearer token on TCP listeners.
AUTH_METADATA_KEY = "authorization"
#: Largest message either side accepts, in bytes. Reports are a few KiB;
#: stack dumps of hundreds of threads stay well under this.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: Channel and server options that apply :data:`MAX_MESSAGE_BYTES` both ways.
MESSAGE_SIZE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


def bearer_value(token: str) -> str:
    return f"Bearer {token}"


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata that carries ``token`` (none without a token)."""
    return ((AUTH_METADATA_KEY, bearer_value(token)),) if token else ()


def package_version() -> str:
    """The installed distribution's version: pyproject.toml is its one source."""
    try:
        return metadata.version("trainprobe")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


#: This release's version (hook and sidecar are one distribution).
VERSION = package_version()
