"""gRPC status codes both ends treat alike (imports gRPC: load it lazily)."""

from __future__ import annotations

import grpc

#: Refusals that retrying soon will not change: back off straight to the cap.
PERMANENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
