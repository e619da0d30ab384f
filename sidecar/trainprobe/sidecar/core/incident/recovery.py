"""Did the job come back after a kill? Pure bookkeeping of expected recoveries.

After trainprobe kills a rank, an orchestrator (Ray Train, torchrun elastic)
may start a new process for it, which restores the latest checkpoint and
goes on. :class:`RecoveryWatch` remembers each killed (job, rank) and, on the
first report from a *new* pid for it that carries steps, produces a
``recovery`` record: how long until the new process connected, how long
until it finished its first step, and which step that was (the checkpoint it
resumed from is the step before).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainprobe.sidecar.core.session.model import ReportData, WorkerKey, WorkerState


@dataclass
class PendingRecovery:
    incident_id: str
    key: WorkerKey
    old_pid: int
    killed_at: float
    method: str
    reconnected_at: float = 0.0
    new_pid: int = 0


class RecoveryWatch:
    """Killed ranks awaiting a replacement; forgets them after ``expire_s``."""

    def __init__(self, expire_s: float = 3600.0) -> None:
        self.expire_s = expire_s
        self._pending: dict[WorkerKey, PendingRecovery] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def expect(
        self, incident_id: str, key: WorkerKey, old_pid: int, killed_at: float, method: str
    ) -> None:
        """Remember that rank ``key`` (pid ``old_pid``) was killed at ``killed_at``."""
        self._pending[key] = PendingRecovery(incident_id, key, old_pid, killed_at, method)

    def on_report(
        self, state: WorkerState, report: ReportData, now: float
    ) -> dict[str, object] | None:
        """Feed every report; returns a ``recovery`` record once per killed rank."""
        self._expire(now)
        pending = self._pending.get(state.key)
        if pending is None or state.hello.pid == pending.old_pid:
            return None
        if pending.new_pid != state.hello.pid:
            pending.new_pid = state.hello.pid
            pending.reconnected_at = state.first_seen_at
        if not report.has_step:
            return None
        del self._pending[state.key]
        # The first step of the new process: the earliest in its first window.
        pairs = sorted(
            (step, end)
            for step, end in zip(report.recent_steps, report.recent_step_end_mono_ns, strict=False)
            if step > 0 and end > 0
        )
        if pairs:
            first_step, first_end_ns = pairs[0]
        else:
            first_step, first_end_ns = report.last_step, report.last_step_mono_ns
        first_end_at = state.to_local(first_end_ns) if first_end_ns else now
        return {
            "type": "recovery",
            "incident_id": pending.incident_id,
            "job_id": state.key.job_id,
            "rank": state.key.rank,
            "method": pending.method,
            "old_pid": pending.old_pid,
            "new_pid": state.hello.pid,
            "first_step": first_step,
            "reconnected_after_s": round(max(0.0, pending.reconnected_at - pending.killed_at), 3),
            "resumed_after_s": round(max(0.0, first_end_at - pending.killed_at), 3),
        }

    def _expire(self, now: float) -> None:
        for key in [k for k, p in self._pending.items() if now - p.killed_at > self.expire_s]:
            del self._pending[key]
