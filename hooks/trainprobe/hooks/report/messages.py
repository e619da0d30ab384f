"""What the hook's reporter thread sends and answers: Hello, Report, CommandResult.

:class:`MessageMethods` is mixed into
:class:`~trainprobe.hooks.liveness.LivenessProbeHook`; the
:class:`~trainprobe.hooks.report.reporter.Reporter` thread calls its three methods,
never the training thread. A Hello re-reads the identity (Ray may have come up
after the hook); a Report is the step window since the last one plus what each
collector adds; a Command is answered in process (stacks, a notice, an abort).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from trainprobe.hooks.report.identity import Identity, RayIds, ray_ids, resolve_identity
from trainprobe.hooks.report.job_name import job_name as _job_name
from trainprobe.hooks.startup.phases import StartupPhases
from trainprobe.hooks.watch import notices
from trainprobe.hooks.watch.gpu import GpuMonitor
from trainprobe.hooks.watch.stacks import StackSignal, flight_recorder_json, format_all_stacks
from trainprobe.hooks.watch.steps import PhaseRecord, PhaseTracker, StepWindowReader
from trainprobe.proto import PROTOCOL_VERSION, VERSION, probe_pb2

__all__ = ["HOOK_VERSION", "Collector", "MessageMethods"]

log = logging.getLogger("trainprobe.hooks")

HOOK_VERSION = VERSION
#: A collector adds its fields to each report, in the reporter thread.
Collector = Callable[[probe_pb2.Report], None]


class MessageMethods:
    """The reporter thread's callbacks: make_hello, make_report and on_command."""

    _reader: StepWindowReader
    _phases: PhaseTracker
    _gpu: GpuMonitor
    _ray: tuple[RayIds, dict[str, int]]
    _args: tuple[str | None, int | None, int | None, int | None]
    _job_name: str | None
    _thread_ids: tuple[int, int]
    _replica: Any
    _collectors: list[Collector]
    _seq: int
    identity: Identity
    interval_ms: int
    stack_signal: StackSignal
    startup: StartupPhases | None
    startup_watch: bool

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
            startup_watch=self.startup_watch,
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
