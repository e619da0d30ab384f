"""What the rules are configured with, and what they know of a worker's job.

Its own module so that :mod:`rules` (the table) and :mod:`worker_rules` (the
per-worker rules) both import it and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainprobe.sidecar.core.session.thresholds import StallPolicy, StallThreshold

__all__ = ["JobContext", "RuleConfig"]


@dataclass(frozen=True)
class RuleConfig:
    heartbeat_timeout_s: float = 10.0
    stall: StallPolicy = field(default_factory=StallPolicy)
    phase_timeout_s: float = 3600.0
    gpu_memory_ratio: float = 0.95
    gpu_memory_reports: int = 3
    sync_latency_s: float = 5.0
    sync_timeout_s: float = 3.0
    init_straggler_s: float = 5.0
    rendezvous_timeout_s: float = 120.0


@dataclass(frozen=True)
class JobContext:
    """What the rules need to know about a worker's job as a whole.

    Ranks of a job wait on each other: while rank 0 writes a checkpoint inside
    a declared phase, the others sit in their next allreduce. So a phase held
    by any rank covers every rank of the job, and the stall clock of every rank
    restarts when the job's last phase ends.
    """

    threshold: StallThreshold
    phase_holders: tuple[int, ...] = ()
    last_phase_end_at: float = 0.0
    #: Start-up: the ranks waiting inside init_process_group (phase rendezvous),
    #: when the last of them arrived, the job's world size, and how many of its
    #: ranks have a live stream here.
    arrived: tuple[int, ...] = ()
    last_arrival_at: float = 0.0
    world_size: int = 0
    connected: int = 0
    #: After the process group, before the first step: the ranks with no step
    #: yet that wait in a collective (a first allreduce, a barrier), and when
    #: the last of them began waiting there.
    first_waiting: tuple[int, ...] = ()
    first_wait_at: float = 0.0
    #: The same start-up counts from the job's verified sessions alone: what a
    #: verified rank is judged by, so that no unverified session's claim (that it
    #: arrived, or that it is a rank of the world) makes a verified rank late.
    #: None: every session of the job is verified (the counts are the same).
    verified: JobContext | None = None

    def for_rank(self, verified: bool) -> JobContext:
        """The context a rank is judged by at start-up."""
        return self.verified if verified and self.verified is not None else self
