"""From findings to incidents: edge-triggering and grouping, which action an
incident gets (the policy and its kill budget), the actions, and whether a job
came back after a kill.

It may import ``session``, ``judge``, ``job``, the modules at the top of
``core/`` and the standard library, nothing else: tests/test_import_cycles.py
checks it.
"""

from typing import TYPE_CHECKING

from trainprobe.sidecar.core.lazy import lazy_exports

if TYPE_CHECKING:
    from trainprobe.sidecar.core.incident.actions import (
        ACTIONS,
        Action,
        action_record,
        eviction_line,
        for_replicas,
        is_destructive,
    )
    from trainprobe.sidecar.core.incident.incidents import (
        FindingEdges,
        Incident,
        group_incidents,
        next_incident_id,
    )
    from trainprobe.sidecar.core.incident.policy import ActionPolicy, KillBudget, decide
    from trainprobe.sidecar.core.incident.recovery import RecoveryWatch

__all__ = [
    "ACTIONS",
    "Action",
    "ActionPolicy",
    "FindingEdges",
    "Incident",
    "KillBudget",
    "RecoveryWatch",
    "action_record",
    "decide",
    "eviction_line",
    "for_replicas",
    "group_incidents",
    "is_destructive",
    "next_incident_id",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ACTIONS": "actions",
        "Action": "actions",
        "ActionPolicy": "policy",
        "FindingEdges": "incidents",
        "Incident": "incidents",
        "KillBudget": "policy",
        "RecoveryWatch": "recovery",
        "action_record": "actions",
        "decide": "policy",
        "eviction_line": "actions",
        "for_replicas": "actions",
        "group_incidents": "incidents",
        "is_destructive": "actions",
        "next_incident_id": "incidents",
    },
)
