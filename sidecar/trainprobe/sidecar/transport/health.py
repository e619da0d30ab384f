"""The standard gRPC health service (``grpc.health.v1.Health``), for kubelet probes.

Two services:

- ``""``, the sidecar itself: SERVING once its rules have completed a tick,
  NOT_SERVING when the last completed tick is older than ``engine_stall_s``
  (the engine task died, or every tick fails).
- ``trainprobe.workers``: NOT_SERVING from the moment the sidecar has decided
  to kill or restart a worker on its own host (the decision its own kill
  action carries out, :attr:`~trainprobe.sidecar.engine.loop.Engine.kill_decided`)
  until that process is gone or replaced; SERVING otherwise. Workers of other
  hosts (over TCP, or relayed) do not count: the kubelet that asks restarts
  a container of this pod, which would not end them. A training container's
  ``livenessProbe: grpc: {port: <sidecar port>, service: trainprobe.workers}``
  then has the kubelet restart it, without Ray.

- ``trainprobe.ingest``: NOT_SERVING while the sidecar sheds load (a report
  reached it too late to apply in full in the last 10 s, core/overload.py),
  SERVING otherwise. For readiness probes and alerts: an overloaded sidecar
  still judges every worker, so nothing should be restarted for it.

A relay node (``--relay-to``) serves the same service: ``""`` while its relay
loop runs, ``trainprobe.workers`` from an upstream kill order until the
process is gone (:class:`DoomedPids`).

It is answered on every listener without a token (kubelet gRPC probes send
no metadata; see :mod:`~trainprobe.sidecar.transport.auth`). It tells an
unauthenticated caller one bit per service and accepts nothing it stores;
Watch streams, which hold server resources, are capped at
:data:`MAX_WATCHERS`.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2

from trainprobe.sidecar.act.procs import pid_alive, proc_start_ticks
from trainprobe.sidecar.core.model import WorkerState
from trainprobe.sidecar.core.registry import Registry

if TYPE_CHECKING:
    from trainprobe.sidecar.engine.loop import Engine

__all__ = [
    "HEALTH_SERVICE",
    "MAX_WATCHERS",
    "SERVICE_INGEST",
    "SERVICE_SIDECAR",
    "SERVICE_WORKERS",
    "DoomedPids",
    "EngineHealth",
    "Health",
    "session_alive",
]

HEALTH_SERVICE = "grpc.health.v1.Health"
SERVICE_SIDECAR = ""
SERVICE_WORKERS = "trainprobe.workers"
SERVICE_INGEST = "trainprobe.ingest"
#: Concurrent Watch streams; kubelets use Check, so a few are plenty.
MAX_WATCHERS = 16
#: How often a Watch stream looks for a change.
WATCH_POLL_S = 0.1

_Status = health_pb2.HealthCheckResponse.ServingStatus
SERVING = _Status.Value("SERVING")
NOT_SERVING = _Status.Value("NOT_SERVING")
SERVICE_UNKNOWN = _Status.Value("SERVICE_UNKNOWN")


def session_alive(state: WorkerState) -> bool:
    """True while the process of ``state`` may still run: its stream is open,
    or it is in our PID namespace and /proc shows the same process alive."""
    if state.connected:
        return True
    pid = state.hello.pid
    if not state.local or not pid_alive(pid):
        return False
    return state.proc_start_ticks is None or proc_start_ticks(pid) in (None, state.proc_start_ticks)


class EngineHealth:
    """A full sidecar's answers, from its engine: is it ticking, is a worker of
    this host doomed."""

    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        stall_s: float,
        clock: Callable[[], float] = time.monotonic,
        alive: Callable[[WorkerState], bool] = session_alive,
        host: str = "",
    ) -> None:
        self._engine = engine
        self._registry = registry
        self._stall_s = stall_s
        self._clock = clock
        self._alive = alive
        self._host = host or socket.gethostname()

    def ticking(self) -> bool:
        last = self._engine.last_tick_at
        return last is not None and self._clock() - last <= self._stall_s

    def workers_ok(self) -> bool:
        return not self.doomed()

    def doomed(self) -> list[WorkerState]:
        """Sessions on this host decided for a kill or restart whose process is
        still there."""
        return [
            s
            for k, s in list(self._engine.kill_decided.items())
            if self._registry.get(k) is s and self._on_this_host(s) and self._alive(s)
        ]

    def _on_this_host(self, state: WorkerState) -> bool:
        # By the host it names, not by being in our PID namespace: a pod's
        # containers share its name without sharing PIDs, and there the
        # kubelet's restart is the only kill that reaches the process.
        return state.relay is None and state.hello.host == self._host


class DoomedPids:
    """Processes ordered killed, until /proc shows them gone: a relay node's
    ``trainprobe.workers`` (the upstream decides; the node carries kills out)."""

    def __init__(self) -> None:
        self._pids: dict[int, int | None] = {}

    def add(self, pid: int, start_ticks: int | None) -> None:
        self._pids[pid] = start_ticks

    def none_left(self) -> bool:
        for pid, ticks in list(self._pids.items()):
            if not pid_alive(pid) or proc_start_ticks(pid) not in (None, ticks):
                del self._pids[pid]
        return not self._pids


class Health:
    """The gRPC service: Check and Watch, each answer computed when asked from
    two predicates (the sidecar serves; no worker of this host is doomed)."""

    def __init__(
        self,
        sidecar_ok: Callable[[], bool],
        workers_ok: Callable[[], bool],
        ingest_ok: Callable[[], bool] | None = None,
    ) -> None:
        self._checks = {SERVICE_SIDECAR: sidecar_ok, SERVICE_WORKERS: workers_ok}
        if ingest_ok is not None:
            self._checks[SERVICE_INGEST] = ingest_ok
        self._watchers = 0

    def status(self, service: str) -> int:
        check = self._checks.get(service)
        if check is None:
            return SERVICE_UNKNOWN
        return SERVING if check() else NOT_SERVING

    async def check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        status = self.status(request.service)
        if status == SERVICE_UNKNOWN:  # what the protocol asks of Check
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        if self._watchers >= MAX_WATCHERS:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_WATCHERS} Watch streams"
            )
        self._watchers += 1
        try:
            last = None
            while True:
                status = self.status(request.service)
                if status != last:
                    yield health_pb2.HealthCheckResponse(status=status)
                    last = status
                await asyncio.sleep(WATCH_POLL_S)
        finally:
            self._watchers -= 1

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            HEALTH_SERVICE,
            {
                "Check": grpc.unary_unary_rpc_method_handler(
                    self.check,
                    request_deserializer=health_pb2.HealthCheckRequest.FromString,
                    response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
                ),
                "Watch": grpc.unary_stream_rpc_method_handler(
                    self.watch,
                    request_deserializer=health_pb2.HealthCheckRequest.FromString,
                    response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
                ),
            },
        )
