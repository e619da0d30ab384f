"""Bearer-token authentication for TCP listeners (compared in constant time)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

import grpc

from trainprobe.proto import AUTH_METADATA_KEY, bearer_value

log = logging.getLogger("trainprobe.sidecar")


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls without ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._expected = bearer_value(token).encode()

        async def deny(request: Any, context: grpc.aio.ServicerContext) -> None:
            log.warning("rejected UNAUTHENTICATED call from %s", context.peer())
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny_unary = grpc.unary_unary_rpc_method_handler(deny)

        async def deny_stream(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
            await deny(None, context)

        self._deny_stream = grpc.stream_stream_rpc_method_handler(deny_stream)

    async def intercept_service(
        self, continuation: Callable[..., Any], handler_call_details: grpc.HandlerCallDetails
    ) -> Any:
        for key, value in handler_call_details.invocation_metadata or ():
            if key == AUTH_METADATA_KEY:
                got = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(got, self._expected):
                    return await continuation(handler_call_details)
        return (
            self._deny_stream
            if handler_call_details.method.endswith(("/Connect", "/Relay"))
            else (self._deny_unary)
        )
