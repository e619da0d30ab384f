"""Conventions both ends of a gRPC connection share, without importing gRPC."""

from __future__ import annotations

import signal
from importlib import metadata

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


#: Signals a hook may arm for faulthandler stacks, and so the only ones a
#: sidecar ever sends as the stack signal: the real-time ones, which nothing
#: uses by default (never SIGKILL, SIGTERM, SIGSTOP, SIGINT...).
STACK_SIGNALS = range(int(signal.SIGRTMIN), int(signal.SIGRTMAX) + 1)


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

#: The phases a hook made before ``init_process_group`` reports by itself:
#: ``init`` from its birth to the process group (or its first step), and,
#: within it, ``rendezvous`` while its training thread is inside
#: torch.distributed's set-up, waiting for its peers.
INIT_PHASE = "init"
RENDEZVOUS_PHASE = "rendezvous"
STARTUP_PHASES = frozenset({INIT_PHASE, RENDEZVOUS_PHASE})
