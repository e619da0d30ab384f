"""LivenessProbeHook: the one object a training loop holds."""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from trainprobe.hooks import notices
from trainprobe.hooks.collectives import CollectiveMethods
from trainprobe.hooks.identity import ray_ids, resolve_identity
from trainprobe.hooks.job_name import job_name as _job_name
from trainprobe.hooks.ray_handle import HandleRegistration
from trainprobe.hooks.restart_store import install_restart_prefix
from trainprobe.hooks.stacks import StackSignal, flight_recorder_json, format_all_stacks
from trainprobe.hooks.startup import StartupPhases, process_group_ready
from trainprobe.hooks.steps import (
    RING_MASK,
    PhaseRecord,
    PhaseTracker,
    StepRing,
    StepWindowReader,
)
from trainprobe.proto import (
    DEFAULT_TARGET_ENV,
    PROTOCOL_VERSION,
    VERSION,
    default_socket_path,
    parse_endpoint,
    probe_pb2,
    ray_node_socket_path,
    resolve_socket,
)

log = logging.getLogger("trainprobe.hooks")

HOOK_VERSION = VERSION
#: A step ending at least this long (and 2 report intervals) after the one before is
#: reported at once: at most one extra report a second, only after a stall.
PROMPT_MIN_NS = 1_000_000_000
#: A collector adds its fields to each report, in the reporter thread.
Collector = Callable[[probe_pb2.Report], None]

_live_hooks: weakref.WeakSet[LivenessProbeHook] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The child has no reporter thread and must never touch the parent's channel.
    for hook in list(_live_hooks):
        hook._forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


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


def _checked_target(target: str | None, ray_node_id: str) -> str:
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


class _Phase:
    __slots__ = ("_hook", "_name", "_timeout_s", "_token")

    def __init__(self, hook: LivenessProbeHook, name: str, timeout_s: float) -> None:
        self._hook, self._name, self._timeout_s, self._token = hook, name, timeout_s, 0

    def __enter__(self) -> _Phase:
        self._token = self._hook._phases.enter(self._name, self._timeout_s)
        return self

    def __exit__(self, *exc: object) -> None:
        self._hook._phases.exit(self._token)


class LivenessProbeHook(CollectiveMethods):
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
            initialized, else learned later (see :class:`~trainprobe.hooks.gpu.GpuMonitor`).
        start: start the background thread now (tests may delay it).
        torchft: a torchft ``Manager`` to watch from the first Hello on (the
            same as :meth:`watch_torchft` right after construction, without
            a first session under the replica-local rank).
        job_name: the job's human name, shown beside its id (``trainprobe
            status``); defaults to ``$TRAINPROBE_JOB_NAME``, then the script's
            name and the launcher's run id or start time, the same on every
            rank (:mod:`trainprobe.hooks.job_name`).

    Make it first thing, before ``init_process_group``: its identity comes
    from the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``/``MASTER_PORT``), and start-up
    then becomes the phases ``init`` and ``rendezvous`` the sidecar judges:
    a rank that has not reached ``init_process_group`` while its peers wait
    inside is named, with its stack (:mod:`trainprobe.hooks.startup`). Under
    torchrun restarts it also prefixes the process group's store by the
    attempt, so that a plain ``init_process_group`` gets through every
    restart (:mod:`trainprobe.hooks.restart_store`).

    The constructor never raises for a bad sidecar address: the hook is then
    inert, with one logged warning, and training runs on unmonitored.

    :meth:`on_step_end` is the only call on the training thread's hot path: it
    stores a timestamp and a counter and nothing else. All I/O happens in one
    daemon thread; nothing the sidecar does can block or raise into training.
    """

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
        self.target = _checked_target(target, self.identity.ray.node_id)
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
        from trainprobe.hooks.reporter import Reporter

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

    def watch_torchft(self, manager: Any, num_replicas: int | None = None) -> bool:
        """Report this process's replica group from a torchft ``Manager``.

        Hello then carries the replica id, group rank and group world size, and
        every report the quorum id, committed step and what the training thread
        waits for inside torchft (quorum, replicated allreduce, commit). The
        sidecar judges the job as replica groups: a replica that stopped
        stepping while the others wait for it is the culprit, the waiting ones
        are never killed, and its action is to evict the culprit group.

        The job-wide rank is torchft's own (the replica id's trailing digits x
        group world size + group rank) when the identity did not already give
        a job-wide one (Ray Train does; one torchrun per replica group does not);
        ``num_replicas`` sets the job-wide world size in that case (default: the
        Manager's ``min_replica_size``). Set ``TRAINPROBE_JOB_ID`` alike in every
        replica so they are one job. Use :class:`trainprobe.hooks.torchft.
        DistributedDataParallel` (torchft's wrapper with a comm hook whose error
        path works) to also count the replicated allreduce. Never raises.
        """
        try:
            from trainprobe.hooks import torchft as ft

            before = self._replica
            watch = ft.install(manager, self._sync.group(ft.GROUP))
            self._replica = watch
            if not isinstance(before, ft.ReplicaWatch):
                self._collectors.append(watch.collect)
            self._adopt_replica_rank(watch, manager, num_replicas)
            moved = before is not None and before.replica_id != watch.replica_id
            if moved and self._reporter is not None:
                self._reporter.renew()  # Ray Train's replica group, now the Manager's id
            return True
        except Exception:
            log.warning("trainprobe: watch_torchft failed; no replica reported", exc_info=True)
            return False

    def _ray_replica_group(self) -> None:
        """Under Ray Train with TorchftConfig: the replica group from Ray Train itself;
        under a launcher of replica groups (``trainprobe run``), from its env."""
        try:
            from trainprobe.hooks.replicated import launcher_replica_group
            from trainprobe.hooks.torchft import ray_train_replica_group

            if self._ray[1]:
                self._replica = ray_train_replica_group(self._ray[1])
            else:
                self._replica = launcher_replica_group()
        except Exception:
            log.debug("trainprobe: no Ray Train replica group", exc_info=True)

    def _adopt_replica_rank(self, watch: Any, manager: Any, num_replicas: int | None) -> None:
        from trainprobe.hooks.torchft import replica_rank

        job_id, rank, world_size, local_rank = self._args
        ident = self.identity
        if rank is not None or ident.world_size > watch.group_world_size:
            return  # the identity is already job-wide (Ray Train, or given)
        global_rank = replica_rank(watch.replica_id, watch.group_rank, watch.group_world_size)
        if global_rank is None:
            log.warning(
                "trainprobe: torchft replica id %r has no trailing number: give the hook a "
                "job-wide rank (TRAINPROBE_RANK) so replicas do not share ranks",
                watch.replica_id,
            )
            return
        replicas = num_replicas or int(getattr(manager, "_min_replica_size", 1) or 1)
        world = max(world_size or 0, replicas * watch.group_world_size, global_rank + 1)
        local = ident.local_rank if local_rank is None else local_rank
        if (global_rank, world) == (ident.rank, ident.world_size):
            return
        self._args = (job_id, global_rank, world, local)
        self.identity = resolve_identity(*self._args, ray_info=self._ray)
        if self._reporter is not None:  # None: an inert hook (a bad target)
            self._reporter.renew()  # a new session, under the job-wide rank

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

    # -- reporter thread -------------------------------------------------------

    def _make_hello(self) -> probe_pb2.Hello:
        self._reader.rewind()  # a new session: resend the recent step times
        if not self._ray[0].job_id:  # Ray may have been initialized after the hook
            self._ray = ray_ids()
        ident = resolve_identity(*self._args, ray_info=self._ray)
        self.identity = ident
        gpu_uuid, cuda_device = self._gpu.identity()
        if ident.rank_guessed:
            log.debug("trainprobe: no rank found (RANK, torch.distributed, Ray Train); using 0")
        return probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            hook_version=HOOK_VERSION,
            job_id=ident.job_id,
            job_name=_job_name(self._job_name, self._args[0], ident.ray.run_name, ident.ray.job_id),
            rank=ident.rank,
            local_rank=ident.local_rank,
            world_size=ident.world_size,
            host=ident.host,
            pid=ident.pid,
            interval_ms=self.interval_ms,
            gpu_uuid=gpu_uuid,
            cuda_device=cuda_device,
            stack_signal=self.stack_signal.signum,
            stack_file=self.stack_signal.path,
            thread_id=self._thread_ids[0],
            thread_native_id=self._thread_ids[1],
            replica=self._replica.identity_pb() if self._replica is not None else None,
            ray=probe_pb2.RayIdentity(
                job_id=ident.ray.job_id,
                node_id=ident.ray.node_id,
                actor_id=ident.ray.actor_id,
                worker_id=ident.ray.worker_id,
                trial_or_run_name=ident.ray.run_name,
            ),
        )

    def _make_report(self) -> probe_pb2.Report:
        if self.startup is not None:
            self.startup.poll()
        active, finished = self._phases.snapshot()
        win = self._reader.read(active, finished)
        self._seq += 1
        report = probe_pb2.Report(
            seq=self._seq,
            mono_ns=time.monotonic_ns(),
            wall_ns=time.time_ns(),
            has_step=win.last_step is not None,
            last_step=win.last_step or 0,
            last_step_mono_ns=win.last_step_ns,
            total_steps=win.total_steps,
            step_stats=probe_pb2.StepStats(count=win.count, sum_s=win.sum_s, max_s=win.max_s),
            active_phases=[_phase_pb(p) for p in active],
            finished_phases=[_phase_pb(p) for p in finished],
            recent_steps=win.recent_steps,
            recent_step_end_mono_ns=win.recent_ends_ns,
            recent_step_s=win.recent_s,
        )
        for collector in self._collectors:
            try:
                collector(report)
            except Exception:
                log.debug("trainprobe: collector %r failed", collector, exc_info=True)
        return report

    def _on_command(self, command: probe_pb2.Command) -> probe_pb2.CommandResult | None:
        kind = command.WhichOneof("kind")
        if kind == "dump_stacks":
            stacks = format_all_stacks(
                skip_thread_ids=frozenset({threading.get_ident()}), first=self._thread_ids[0]
            )
            fr = flight_recorder_json() if command.dump_stacks.include_flight_recorder else ""
            return probe_pb2.CommandResult(
                command_id=command.id,
                ok=True,
                python_stacks=stacks,
                flight_recorder_json=fr,
                method="in-process",
            )
        if kind == "notice":
            notices.receive_pb(command.notice)
            replica = self._replica
            if command.notice.evicted_replica and replica is not None:
                # The survivors discard this step now (should_commit() is False)
                # instead of committing one the evicted replica took part in.
                told = replica.report_error(notices.latest_line())
                method = "report_error" if told else "logged"
                return probe_pb2.CommandResult(command_id=command.id, ok=True, method=method)
            return probe_pb2.CommandResult(command_id=command.id, ok=True, method="logged")
        if kind == "abort":
            self._abort(command.abort.reason, command.abort.grace_s)
            return probe_pb2.CommandResult(command_id=command.id, ok=True, method="sigterm")
        return probe_pb2.CommandResult(command_id=command.id, ok=False, error=f"unknown {kind}")

    def _abort(self, reason: str, grace_s: float) -> None:
        log.error("trainprobe: sidecar asked this process to abort: %s", reason)
        os.kill(os.getpid(), signal.SIGTERM)

        def _hard_exit() -> None:
            time.sleep(max(0.0, grace_s) or 5.0)
            os._exit(134)

        threading.Thread(target=_hard_exit, name="trainprobe-abort", daemon=True).start()


def _phase_pb(p: PhaseRecord) -> probe_pb2.Phase:
    return probe_pb2.Phase(
        name=p.name, start_mono_ns=p.start_ns, timeout_s=p.timeout_s, end_mono_ns=p.end_ns
    )
