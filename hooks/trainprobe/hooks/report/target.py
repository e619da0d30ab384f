"""Where the hook finds its sidecar: the address it reports to, or none at all."""

from __future__ import annotations

import logging
import os

from trainprobe.proto import (
    DEFAULT_TARGET_ENV,
    default_socket_path,
    parse_endpoint,
    ray_node_socket_path,
    resolve_socket,
)

__all__ = ["checked_target", "resolve_target"]

log = logging.getLogger("trainprobe.hooks")


def resolve_target(target: str | None, ray_node_id: str = "") -> str:
    """The sidecar address in gRPC syntax: argument, ``TRAINPROBE_TARGET``,
    this Ray node's sidecar socket if it exists, else the default socket.

    Under Ray, when neither socket exists yet, the node's socket wins: a
    per-node sidecar started after the hook then still finds it.
    """
    text = target or os.environ.get(DEFAULT_TARGET_ENV, "")
    if not text and ray_node_id:
        node_sock = ray_node_socket_path(ray_node_id)
        if node_sock.exists() or not default_socket_path().exists():
            text = str(node_sock)
    if not text:
        text = str(default_socket_path())
    # A socket in a shared directory (a kubelet's emptyDir) is in the sidecar's
    # own trainprobe-<uid> inside it: the same rule the sidecar listened by.
    return resolve_socket(parse_endpoint(text)).grpc_target


def checked_target(target: str | None, ray_node_id: str) -> str:
    """:func:`resolve_target`, or "" (an inert hook) with one warning for a bad address."""
    try:
        resolved = resolve_target(target, ray_node_id)
        if "\x00" in resolved:
            raise ValueError("the address contains a NUL byte")
        return resolved
    except Exception as err:
        # A bad address must never stop training: the hook stays inert.
        log.warning(
            "trainprobe: bad sidecar address %r (%s); this process is NOT monitored. "
            "Set TRAINPROBE_TARGET (or target=) to unix:///abs/path or host:port",
            target if target is not None else os.environ.get(DEFAULT_TARGET_ENV, ""),
            err,
        )
        return ""
