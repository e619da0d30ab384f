"""A node's long-lived stream to its upstream sidecar: what Relay and JobSync share.

Both links open the same kind of channel (the upstream's socket directory
checked on every try, TLS when pinned, the message size limits), wait for the
upstream's acceptance in the initial metadata before sending (so a wrong token
is a refusal, not a link), and log an error as one line.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from trainprobe.proto import MESSAGE_SIZE_OPTIONS, Endpoint, check_socket_dir

__all__ = ["accepted", "open_channel", "reason"]


def open_channel(
    upstream: Endpoint, doing: str, tls: grpc.ChannelCredentials | None
) -> grpc.aio.Channel:
    """A channel to ``upstream``; ``doing`` ends the sentence of a refused directory.

    Checked again on every try: the directory may have been made, or opened up,
    since; and no channel until it exists (gRPC would connect to what appears
    later)."""
    target = check_socket_dir(upstream, doing, present=True).grpc_target
    if tls is None:
        return grpc.aio.insecure_channel(target, options=MESSAGE_SIZE_OPTIONS)
    return grpc.aio.secure_channel(target, tls, options=MESSAGE_SIZE_OPTIONS)


async def accepted(call: Any, key: str, timeout_s: float) -> None:
    """Return once the upstream accepted the stream (``key`` in its initial
    metadata); raise its refusal (a wrong token) as the call's status."""
    metadata = await asyncio.wait_for(call.initial_metadata(), timeout_s)
    if metadata is not None and key in metadata:
        return
    code = await asyncio.wait_for(call.code(), timeout_s)
    raise grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=await call.details()
    )


def reason(error: BaseException | None) -> str:
    """An upstream error as one line: ``CODE: details`` for gRPC statuses."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__
