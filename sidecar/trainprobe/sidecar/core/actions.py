"""The actions an incident can get, and the one shape of an action record."""

from __future__ import annotations

from enum import Enum


class Action(str, Enum):
    """Actions in increasing force.

    A ``str`` enum so settings, incident records and comparisons with plain
    strings keep working; ``restart`` is a kill that asks the orchestrator
    (Ray) to bring the worker group back.
    """

    OBSERVE = "observe"
    DUMP = "dump"
    KILL = "kill"
    RESTART = "restart"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def destructive(self) -> bool:
        return self in DESTRUCTIVE


#: Every action name, for settings choices and docs.
ACTIONS: tuple[str, ...] = tuple(a.value for a in Action)
DESTRUCTIVE = frozenset({Action.KILL, Action.RESTART})
#: What a DEGRADED verdict may get: it never kills.
DEGRADED_ACTIONS: tuple[str, ...] = (Action.OBSERVE.value, Action.DUMP.value)


def is_destructive(action: str) -> bool:
    return action in DESTRUCTIVE


def action_record(
    incident_id: str, job_id: str, action: str, **fields: object
) -> dict[str, object]:
    """An ``action`` line of the incident log (the format is public: keep it stable)."""
    return {
        "type": "action",
        "incident_id": incident_id,
        "job_id": job_id,
        "action": str(action),
        **fields,
    }
