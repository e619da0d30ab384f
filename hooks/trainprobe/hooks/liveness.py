"""LivenessProbeHook: the one object a training loop holds.

The class holds the training thread's side (:meth:`~LivenessProbeHook.on_step_end`,
:meth:`~LivenessProbeHook.phase`) and the hook's life (start, close, fork); its
other halves are mixins: collectives (:mod:`trainprobe.hooks.watch.collectives`),
the replica group (:mod:`trainprobe.hooks.replica.watch`) and what the
reporter thread sends (:mod:`trainprobe.hooks.report.messages`). The sidecar's
address is found by :mod:`trainprobe.hooks.report.target`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from trainprobe.hooks.replica.watch import ReplicaMethods
from trainprobe.hooks.report.identity import ray_ids, resolve_identity
from trainprobe.hooks.report.messages import HOOK_VERSION, Collector, MessageMethods
from trainprobe.hooks.report.ray_handle import HandleRegistration
from trainprobe.hooks.report.target import checked_target, resolve_target
from trainprobe.hooks.startup.phases import StartupPhases, process_group_ready
from trainprobe.hooks.startup.restart_store import install_restart_prefix
from trainprobe.hooks.watch.collectives import CollectiveMethods
from trainprobe.hooks.watch.stacks import StackSignal
from trainprobe.hooks.watch.steps import RING_MASK, PhaseTracker, StepRing, StepWindowReader

__all__ = ["HOOK_VERSION", "PROMPT_MIN_NS", "Collector", "LivenessProbeHook", "resolve_target"]

log = logging.getLogger("trainprobe.hooks")

#: A step ending at least this long (and 2 report intervals) after the one before is
#: reported at once: at most one extra report a second, only after a stall.
PROMPT_MIN_NS = 1_000_000_000

_live_hooks: weakref.WeakSet[LivenessProbeHook] = weakref.WeakSet()

#: What a new hook ends first: the start-up hook that importing a framework
#: callback keeps until a hook of the script's own takes over (one hook a
#: process). A slot, set by :mod:`trainprobe.hooks.framework.startup`, which
#: imports this module and so cannot be imported here.
_before_new_hook: list[Callable[[], None]] = []


def _after_fork_in_child() -> None:
    # The child has no reporter thread and must never touch the parent's channel.
    for hook in list(_live_hooks):
        hook._forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Phase:
    __slots__ = ("_hook", "_name", "_timeout_s", "_token")

    def __init__(self, hook: LivenessProbeHook, name: str, timeout_s: float) -> None:
        self._hook, self._name, self._timeout_s, self._token = hook, name, timeout_s, 0

    def __enter__(self) -> _Phase:
        self._token = self._hook._phases.enter(self._name, self._timeout_s)
        return self

    def __exit__(self, *exc: object) -> None:
        self._hook._phases.exit(self._token)


class LivenessProbeHook(CollectiveMethods, ReplicaMethods, MessageMethods):
    """Reports this training process's liveness to the node's sidecar.

    Args:
        target: sidecar address, ``unix:///abs/path`` or ``host:port``.
            Defaults to ``$TRAINPROBE_TARGET``, then this Ray node's sidecar
            socket, then the per-user socket ``<tmp>/trainprobe-<uid>/sidecar.sock``.
        interval_ms: how often the background thread sends a report (10..60000).
        job_id, rank, world_size, local_rank: identity; each defaults to the
            environment (``TRAINPROBE_JOB_ID``, ``RANK``, ``WORLD_SIZE``,
            ``LOCAL_RANK``), then ``torch.distributed`` or Ray Train.
        token: bearer token for TCP sidecars; defaults to ``$TRAINPROBE_TOKEN``.
        cuda_device: the CUDA device this process trains on, for GPU memory
            figures; by default the current device if CUDA is already
            initialized, else learned later (see :class:`~trainprobe.hooks.watch.gpu.GpuMonitor`).
        start: start the background thread now (tests may delay it).
        torchft: a torchft ``Manager`` to watch from the first Hello on (the
            same as :meth:`watch_torchft` right after construction, without
            a first session under the replica-local rank).
        job_name: the job's human name, shown beside its id (``trainprobe
            status``); defaults to ``$TRAINPROBE_JOB_NAME``, then the script's
            name and the launcher's run id or start time, the same on every
            rank (:mod:`trainprobe.hooks.report.job_name`).

    Make it first thing, before ``init_process_group``: its identity comes
    from the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``/``MASTER_PORT``), and start-up
    then becomes the phases ``init`` and ``rendezvous`` the sidecar judges:
    a rank that has not reached ``init_process_group`` while its peers wait
    inside is named, with its stack (:mod:`trainprobe.hooks.startup.phases`). Under
    torchrun restarts it also prefixes the process group's store by the
    attempt, so that a plain ``init_process_group`` gets through every
    restart (:mod:`trainprobe.hooks.startup.restart_store`).

    The constructor never raises for a bad sidecar address: the hook is then
    inert, with one logged warning, and training runs on unmonitored.

    :meth:`on_step_end` is the only call on the training thread's hot path: it
    stores a timestamp and a counter and nothing else. All I/O happens in one
    daemon thread; nothing the sidecar does can block or raise into training.
    """

    #: Whether this is the start-up hook a framework callback's import makes
    #: (``Hello.startup_watch``): it may never see a step, and says so.
    startup_watch = False

    def __init__(
        self,
        target: str | None = None,
        interval_ms: int = 1000,
        job_id: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        local_rank: int | None = None,
        token: str | None = None,
        cuda_device: int | None = None,
        start: bool = True,
        torchft: Any = None,
        job_name: str | None = None,
    ) -> None:
        if not isinstance(interval_ms, int) or not 10 <= interval_ms <= 60_000:
            raise ValueError(f"interval_ms must be an integer in 10..60000, got {interval_ms!r}")
        if not self.startup_watch:
            for end in list(_before_new_hook):
                end()
        self._ring = StepRing()
        self._phases = PhaseTracker()
        self._reader = StepWindowReader(self._ring)
        self._init_collectives(self._ring, cuda_device)
        self._collectors: list[Collector] = [self._gpu.collect, self._collect_sync]
        #: The torchft Manager's view of this process's replica (watch_torchft).
        self._replica: Any = None
        self._args = (job_id, rank, world_size, local_rank)
        self._job_name = job_name
        self._seq = 0
        self._closed = False
        self._forked = False
        self._pid = os.getpid()
        # Ray ids and Ray Train ranks are read here, in the thread that builds
        # the hook (train_func), and reused by the reporter thread.
        self._ray = ray_ids()
        self.identity = resolve_identity(*self._args, ray_info=self._ray)
        self.target = checked_target(target, self.identity.ray.node_id)
        self.interval_ms = interval_ms
        #: A step that ends longer than this after the last one is reported at once.
        self._prompt_ns = max(PROMPT_MIN_NS, 2 * interval_ms * 1_000_000)
        ray = self.identity.ray
        #: Under a Ray actor: hands our handle to the node's sidecar (kill by id).
        self.ray_handle = (
            HandleRegistration(ray.node_id, ray.actor_id, self._pid)
            if ray.actor_id and ray.node_id
            else None
        )
        # gRPC is needed from here on, not to import trainprobe.hooks.
        from trainprobe.hooks.report.reporter import Reporter

        self._reporter: Reporter | None = None
        if self.target:
            self._reporter = Reporter(
                target=self.target,
                interval_s=interval_ms / 1000.0,
                make_hello=self._make_hello,
                make_report=self._make_report,
                on_command=self._on_command,
                token=token if token is not None else os.environ.get("TRAINPROBE_TOKEN") or None,
                on_connected=self.ray_handle.poke if self.ray_handle is not None else None,
            )
        if any(not h._closed and h._pid == self._pid for h in _live_hooks):
            log.warning(
                "trainprobe: another LivenessProbeHook is already active in this process; "
                "create one per process and share it (both would report as rank %d)",
                self.identity.rank,
            )
        if torchft is not None:
            self.watch_torchft(torchft)
        else:
            self._ray_replica_group()
        # The thread that builds the hook trains (a script's main thread,
        # train_func's under Ray Train): its stack is the one that matters.
        self._thread_ids = (threading.get_ident(), threading.get_native_id())
        #: Made before init_process_group: start-up is the phases init and rendezvous.
        self.startup: StartupPhases | None = None
        if not process_group_ready():
            install_restart_prefix()
            if self.identity.world_size > 1:
                self.startup = StartupPhases(self._phases, self._ring, self._thread_ids[0])
        #: faulthandler on a signal: stacks the sidecar can read while a C call holds the GIL.
        self.stack_signal = StackSignal()
        if start:
            self.stack_signal.arm()
        _live_hooks.add(self)
        atexit.register(self.close)
        if start and self._reporter is not None:
            self._reporter.start()
            if self.ray_handle is not None:
                self.ray_handle.start()

    # -- training thread -------------------------------------------------------

    def on_step_end(self, step: int | None = None) -> None:
        """Mark a completed training step. About a microsecond; never blocks or raises.

        ``step`` should be a Python int (a tensor is never read, so it cannot
        force a device sync); by default steps are counted from 1.
        """
        t = time.monotonic_ns()
        ring = self._ring
        n = ring.n
        gap = t - ring.ends[(n - 1) & RING_MASK]
        ring.ends[n & RING_MASK] = t
        ring.steps[n & RING_MASK] = n + 1 if step is None else step
        ring.n = n + 1
        if n and gap > self._prompt_ns and self._reporter is not None:
            # The job steps again after a stall: say so now, not at the next
            # interval, so a stall that ends by itself is never judged as going on.
            self._reporter.report_soon()

    def phase(
        self, name: str, timeout_s: float | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """Declare a long phase (checkpoint, eval, compile warm-up).

        Inside it the stall rule does not apply; the phase is judged by its own
        ``timeout_s`` instead (the sidecar's ``phase_timeout_s`` if None).
        """
        t = 0.0
        if timeout_s is not None:
            try:
                t = float(timeout_s)
            except (TypeError, ValueError):
                t = 0.0
            if not math.isfinite(t) or t < 0:
                log.warning("trainprobe: phase %r: ignoring bad timeout_s=%r", name, timeout_s)
                t = 0.0
        return _Phase(self, str(name), t)

    def add_collector(self, collector: Collector) -> None:
        """Run ``collector(report)`` in the reporter thread before each report."""
        self._collectors.append(collector)

    def close(self) -> None:
        """Send a clean Goodbye and stop the background thread (at most ~2 s)."""
        if self._closed or self._forked or os.getpid() != self._pid:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self.ray_handle is not None:
            self.ray_handle.stop()
        if self._reporter is not None:
            self._reporter.stop(timeout_s=2.0)
        self.stack_signal.disarm()

    @property
    def connected(self) -> bool:
        """Whether a sidecar has accepted this process's reports."""
        return self._reporter is not None and self._reporter.connected

    def __enter__(self) -> LivenessProbeHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
