"""Bearer-token authentication for TCP listeners (compared in constant time).

The standard health service alone is exempt: kubelet probes carry no token.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

import grpc

from trainprobe.proto import AUTH_METADATA_KEY, bearer_value

log = logging.getLogger("trainprobe.sidecar")

#: The only methods served without a token: the standard health service's.
_HEALTH_PREFIX = "/grpc.health.v1.Health/"


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
        if handler_call_details.method.startswith(_HEALTH_PREFIX):
            # kubelet gRPC probes send no metadata; Health reveals one bit per
            # service and changes nothing (see transport/health.py).
            return await continuation(handler_call_details)
        for key, value in handler_call_details.invocation_metadata or ():
            if key == AUTH_METADATA_KEY:
                got = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(got, self._expected):
                    return await continuation(handler_call_details)
        return (
            self._deny_stream
            if handler_call_details.method.endswith(("/Connect", "/Relay", "/JobSync"))
            else (self._deny_unary)
        )
