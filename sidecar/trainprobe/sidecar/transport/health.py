"""The standard gRPC health service (``grpc.health.v1.Health``), for kubelet probes.

Two services:

- ``""``, the sidecar itself: SERVING once its rules have completed a tick,
  NOT_SERVING when the last completed tick is older than ``engine_stall_s``
  (the engine task died, or every tick fails).
- ``trainprobe.workers``: NOT_SERVING from the moment the sidecar has decided
  to kill or restart a worker whose pid it verified itself (an identity
  ticket over its Unix socket: :attr:`WorkerState.local`) until that process
  is gone, and for at least :data:`MIN_NOT_SERVING_S` after the decision;
  SERVING otherwise. Only the kernel's word counts: a session without a
  verified pid (TCP, a Unix client without a ticket, a relayed one) never
  moves it, whatever host it names, because a client that can go silent
  could otherwise have the kubelet restart a healthy trainer. "Gone" is
  read from ``/proc`` (the pid with the start time it had when verified),
  not from the stream, so a process whose stream closed but which still
  runs keeps it NOT_SERVING. A training container's
  ``livenessProbe: grpc: {port: <sidecar port>, service: trainprobe.workers}``
  then has the kubelet restart it, without Ray.

- ``trainprobe.ingest``: NOT_SERVING while the sidecar sheds load (a report
  reached it too late to apply in full in the last 10 s, core/session/overload.py)
  or is behind its reports (its own lateness reached 0.5 s in the last 10 s,
  core/session/pace.py: it then defers verdicts that its lateness would make),
  SERVING otherwise. For readiness probes and alerts: an overloaded sidecar
  still judges every worker, so nothing should be restarted for it.
  ``trainprobe status`` gives the detail (``StatusReply.ingest``).

A relay node (``--relay-to``) serves the same service: ``""`` while its relay
loop runs, ``trainprobe.workers`` from an upstream kill order for a process
it verified until that process is gone (:class:`DoomedPids`, with the same
minimum).

It is answered on every listener without a token (kubelet gRPC probes send
no metadata; see :mod:`~trainprobe.sidecar.transport.listen.auth`). It tells an
unauthenticated caller one bit per service and accepts nothing it stores;
Watch streams, which hold server resources, are capped at
:data:`MAX_WATCHERS`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2

from trainprobe.sidecar.act.procs import lives
from trainprobe.sidecar.core.session.model import WorkerState
from trainprobe.sidecar.transport.doom_files import DoomFiles

if TYPE_CHECKING:
    from trainprobe.sidecar.engine.loop import Engine

__all__ = [
    "HEALTH_SERVICE",
    "MAX_WATCHERS",
    "MIN_NOT_SERVING_S",
    "SERVICE_INGEST",
    "SERVICE_SIDECAR",
    "SERVICE_WORKERS",
    "DoomedPids",
    "EngineHealth",
    "Health",
]

HEALTH_SERVICE = "grpc.health.v1.Health"
SERVICE_SIDECAR = ""
SERVICE_WORKERS = "trainprobe.workers"
SERVICE_INGEST = "trainprobe.ingest"
#: Concurrent Watch streams; kubelets use Check, so a few are plenty.
MAX_WATCHERS = 16
#: The least time ``trainprobe.workers`` stays NOT_SERVING after a kill
#: decision, so that a probe polling every second sees it (twice the period,
#: for a late probe). Below a kubelet's ``periodSeconds x (failureThreshold - 1)``
#: it never restarts a container whose worker the kill already ended.
MIN_NOT_SERVING_S = 2.0
#: Doomed processes remembered at most (decisions are bounded by the kill budget).
MAX_DOOMED = 4096
#: How often a Watch stream looks for a change.
WATCH_POLL_S = 0.1
#: How often decisions written down are checked for processes gone, while any is left.
SWEEP_S = 1.0

_Status = health_pb2.HealthCheckResponse.ServingStatus
SERVING = _Status.Value("SERVING")
NOT_SERVING = _Status.Value("NOT_SERVING")
SERVICE_UNKNOWN = _Status.Value("SERVICE_UNKNOWN")


class DoomedPids:
    """Processes decided killed, each until /proc shows it gone and at least
    ``min_s`` after the decision: ``trainprobe.workers`` is NOT_SERVING while
    any is left.

    The minimum makes the decision observable: a hung worker's kill usually
    ends it within milliseconds, between two probes. Kept by pid and start
    time, not by session, so a replaced or forgotten session does not hide
    a process that still runs. Bounded (:data:`MAX_DOOMED`, the oldest first).
    """

    def __init__(
        self, min_s: float = MIN_NOT_SERVING_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_s = min_s
        self._clock = clock
        #: pid -> (start ticks, decided at)
        self._pids: dict[int, tuple[int | None, float]] = {}
        #: Where the decisions are also written down, once a Unix socket is open.
        self.files: DoomFiles | None = None
        self._sweeping = False

    def add(self, pid: int, start_ticks: int | None) -> None:
        if pid <= 0:
            return
        self._pids.pop(pid, None)
        self._pids[pid] = (start_ticks, self._clock())
        if self.files is not None:
            self.files.add(pid, start_ticks)
            self._sweep_soon()
        while len(self._pids) > MAX_DOOMED:
            self._forget(next(iter(self._pids)))

    def _sweep_soon(self) -> None:
        """Look again in :data:`SWEEP_S` while any is left: the files must go with
        their processes though no probe asks this service (the exec probe reads
        them instead, and a directory of stale files would slow it down)."""
        if self._sweeping:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop (a unit test's clock): asked only
            return
        self._sweeping = True
        loop.call_later(SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        self._sweeping = False
        if not self.none_left():
            self._sweep_soon()

    def _forget(self, pid: int) -> None:
        del self._pids[pid]
        if self.files is not None:
            self.files.remove(pid)

    def none_left(self) -> bool:
        now = self._clock()
        for pid, (ticks, at) in list(self._pids.items()):
            if now - at < self.min_s:
                continue
            if not lives(pid, ticks):
                self._forget(pid)
        return not self._pids


class EngineHealth:
    """A full sidecar's answers, from its engine: is it ticking, is a verified
    worker of this sidecar doomed."""

    def __init__(
        self,
        engine: Engine,
        stall_s: float,
        clock: Callable[[], float] = time.monotonic,
        min_not_serving_s: float = MIN_NOT_SERVING_S,
    ) -> None:
        self._engine = engine
        self._stall_s = stall_s
        self._clock = clock
        self.doomed = DoomedPids(min_not_serving_s, clock)
        engine.kill_listeners.append(self.on_kill_decided)

    def on_kill_decided(self, state: WorkerState) -> None:
        """The engine decided to kill or restart ``state``: only a pid this
        sidecar verified (and so could signal) counts."""
        if state.local and state.verified and state.relay is None:
            self.doomed.add(state.hello.pid, state.proc_start_ticks)

    def ticking(self) -> bool:
        last = self._engine.last_tick_at
        return last is not None and self._clock() - last <= self._stall_s

    def workers_ok(self) -> bool:
        return self.doomed.none_left()


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
