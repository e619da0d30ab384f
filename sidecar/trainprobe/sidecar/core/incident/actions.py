"""The actions an incident can get, and the one shape of an action record."""

from __future__ import annotations

from enum import Enum


class Action(str, Enum):
    """Actions in increasing force.

    A ``str`` enum so settings, incident records and comparisons with plain
    strings keep working; ``restart`` is a kill that asks the orchestrator
    (Ray) to bring the worker group back; ``evict`` ends one replica group of
    a replicated (torchft) job and tells the others, which go on without it
    (a kill or restart of a replicated job's culprit is carried out as one).
    """

    OBSERVE = "observe"
    DUMP = "dump"
    KILL = "kill"
    RESTART = "restart"
    EVICT = "evict"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def destructive(self) -> bool:
        return self in DESTRUCTIVE


#: Every action name, for settings choices and docs.
ACTIONS: tuple[str, ...] = tuple(a.value for a in Action)
DESTRUCTIVE = frozenset({Action.KILL, Action.RESTART, Action.EVICT})
#: What a DEGRADED verdict may get: it never kills.
DEGRADED_ACTIONS: tuple[str, ...] = (Action.OBSERVE.value, Action.DUMP.value)


def is_destructive(action: str) -> bool:
    return action in DESTRUCTIVE


def for_replicas(action: str, replicated: bool) -> str:
    """The action a culprit gets: a destructive one on a culprit replica group
    is an eviction; ``evict`` on a job that is not replicated is a kill."""
    if replicated and is_destructive(action):
        return Action.EVICT
    if not replicated and action == Action.EVICT:
        return Action.KILL
    return action


def eviction_line(replicas: list[str], replicas_left: int) -> str:
    """``replica R evicted; N replicas go on`` (incident, status, span, log)."""
    which = ", ".join(replicas) or "?"
    noun = "replica" if len(replicas) <= 1 else "replicas"
    left = "replica goes" if replicas_left == 1 else "replicas go"
    return f"{noun} {which} evicted; {replicas_left} {left} on"


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
