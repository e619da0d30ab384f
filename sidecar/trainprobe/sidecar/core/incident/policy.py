"""Which action an incident gets, and the brake on repeated kills."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from trainprobe.sidecar.core.incident.actions import Action, is_destructive
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.session.model import Verdict


@dataclass(frozen=True)
class ActionPolicy:
    on_hung: str = Action.KILL
    on_unresponsive: str = Action.KILL
    on_degraded: str = Action.OBSERVE
    on_dead: str = Action.OBSERVE
    dry_run: bool = False
    max_kills_per_hour: int = 10

    def for_verdict(self, verdict: Verdict) -> str:
        return {
            Verdict.HUNG: self.on_hung,
            Verdict.UNRESPONSIVE: self.on_unresponsive,
            Verdict.DEGRADED: self.on_degraded,
            Verdict.DEAD: self.on_dead,
        }.get(verdict, Action.OBSERVE)


class KillBudget:
    """At most ``limit`` destructive actions per job in any hour.

    One incident counts once however many ranks it kills: a bad threshold
    then costs at most ``limit`` job restarts an hour, not a kill loop.
    """

    WINDOW_S = 3600.0

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._spent: dict[str, deque[float]] = {}

    def remaining(self, job_id: str, now: float) -> int:
        spent = self._spent.get(job_id)
        if spent is None:
            return self.limit
        while spent and now - spent[0] >= self.WINDOW_S:
            spent.popleft()
        if not spent:  # an hour without kills: nothing to remember of this job
            del self._spent[job_id]
            return self.limit
        return self.limit - len(spent)

    def spend(self, job_id: str, now: float) -> bool:
        if self.remaining(job_id, now) <= 0:
            return False
        self._spent.setdefault(job_id, deque()).append(now)
        return True

    def __len__(self) -> int:
        """Jobs with a kill in the last hour."""
        return len(self._spent)


def decide(incident: Incident, policy: ActionPolicy, budget: KillBudget, now: float) -> None:
    """Set ``incident.action``, ``action_reason`` and ``dry_run`` in place."""
    action = policy.for_verdict(incident.verdict)
    reason = f"on_{incident.verdict.value.lower()}={action}"
    if is_destructive(action) and not incident.targets:
        # A diagnosed hang whose culprits live elsewhere: nothing here to kill,
        # and no kill spent from the budget.
        reason = f"{reason}, but no rank of this sidecar is a target: observing only"
        action = Action.OBSERVE
    elif is_destructive(action) and not budget.spend(incident.job_id, now):
        reason = (
            f"{reason}, but job {incident.job_id!r} used its {budget.limit} kills this hour "
            "(max_kills_per_hour): observing only"
        )
        action = Action.OBSERVE
    incident.action = action
    incident.action_reason = reason
    incident.dry_run = policy.dry_run
