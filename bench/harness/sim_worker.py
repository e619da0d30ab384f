"""One simulated worker's report stream: the unit of bench/harness/loadgen.py's load.

A :class:`Sim` makes the ``Hello`` and the ``Report`` messages a hook would
send (steps, step times, optional collective issue times and a probe's
overdue phase); the load generators send them over real gRPC, and the
in-process benchmarks hand them to the sidecar's code directly.
"""

from __future__ import annotations

import os
import random
import time

from trainprobe.proto import PROTOCOL_VERSION, probe_pb2

__all__ = ["Sim"]


class Sim:
    """One simulated worker's report stream."""

    def __init__(
        self,
        job: str,
        rank: int,
        world: int,
        k: int,
        fill: int,
        issue_times: int = 0,
        buckets: int = 0,
    ) -> None:
        self.hello = probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            hook_version="loadgen",
            job_id=job,
            rank=rank,
            local_rank=rank % 8,
            world_size=world,
            host=f"loadgen-{os.getpid()}",  # not this host: the sidecar never signals it
            pid=os.getpid(),
            interval_ms=100,
        )
        self.k = k
        self.fill = fill
        self.issue_times = issue_times
        #: DDP gradient buckets a step (0: no sync window): each is an allreduce of
        #: group "default" with a sample, as ``hook.watch_ddp`` reports them.
        self.buckets = buckets
        self.late_ns = 20_000_000 if rank == 7 else 0
        self.seq = 0
        self.step = 0

    def report(self, overrun: bool = False) -> probe_pb2.WorkerMessage:
        now = time.monotonic_ns()
        n = self.fill + self.k if self.seq == 0 else self.k
        self.seq += 1
        dt = 0.05 + random.random() * 0.01
        # Only the last k samples are new steps; a fill's older ones precede step 1.
        steps = [max(0, s) for s in range(self.step + self.k - n + 1, self.step + self.k + 1)]
        self.step += self.k
        ends = [now - int((n - i - 1) * dt * 1e9) for i in range(n)]
        rep = probe_pb2.Report(
            seq=self.seq,
            mono_ns=now,
            wall_ns=time.time_ns(),
            has_step=True,
            last_step=self.step,
            last_step_mono_ns=ends[-1],
            step_stats=probe_pb2.StepStats(count=n, sum_s=n * dt, max_s=dt),
            recent_steps=steps,
            recent_step_end_mono_ns=ends,
            recent_step_s=[dt] * n,
            total_steps=self.step,
        )
        if self.buckets:
            self._ddp(rep, ends[-self.k :], dt)
        if self.issue_times:
            c = self.issue_times
            first = (self.seq - 1) * c + 1
            rep.sync.count = c
            rep.sync.groups.append(
                probe_pb2.GroupSeq(
                    group="default",
                    issued=first + c - 1,
                    completed=first + c - 1,
                    started_seqs=range(first, first + c),
                    started_mono_ns=[now - (c - i) * 1_000_000 + self.late_ns for i in range(c)],
                )
            )
        if overrun:
            rep.active_phases.append(
                probe_pb2.Phase(name="probe", start_mono_ns=now - 10_000_000_000, timeout_s=1.0)
            )
        return probe_pb2.WorkerMessage(report=rep)

    def _ddp(self, rep: probe_pb2.Report, ends: list[int], dt: float) -> None:
        """The report's sync window: ``buckets`` allreduces in each new step, the
        latest 16 sampled (a hook's bound), issued in the step's second half."""
        b, first_step = self.buckets, self.step - len(ends) + 1
        done = (first_step - 1) * b  # the sequence number before this window's first
        count = b * len(ends)
        sync = rep.sync
        sync.count, sync.p50_s, sync.max_s = count, dt / 8, dt / 4
        sync.bytes = count * 25 << 20
        sync.groups.append(
            probe_pb2.GroupSeq(group="default", issued=done + count, completed=done + count)
        )
        for i in range(max(0, count - 16), count):
            end_ns = ends[i // b]
            start = end_ns - int(dt * 1e9 * (b - i % b) / (2 * b))
            sync.samples.append(
                probe_pb2.CollectiveSample(
                    group="default",
                    seq=done + i + 1,
                    op="allreduce",
                    bytes=25 << 20,
                    start_mono_ns=start,
                    end_mono_ns=start + int(dt * 1e9 / (4 * b)),
                    step=first_step + i // b,
                )
            )
