"""A job's hang as one state machine (``machine.step``: plain data in, effects
out): its state, episodes, evidence rounds, following another sidecar, pauses,
patience, and the typed records it writes.

It may import ``session``, ``judge``, ``job``, ``incident``, the modules at the
top of ``core/`` and the standard library, nothing else:
tests/test_import_cycles.py checks it.
"""

from typing import TYPE_CHECKING

from trainprobe.sidecar.core.lazy import lazy_exports

if TYPE_CHECKING:
    from trainprobe.sidecar.core.hang.episodes import (
        CulpritPolicy,
        Episode,
        JobEpisodes,
        plan_targets,
    )
    from trainprobe.sidecar.core.hang.machine import step
    from trainprobe.sidecar.core.hang.patience import PatienceBook, Stall
    from trainprobe.sidecar.core.hang.pause import paused_line, paused_reason
    from trainprobe.sidecar.core.hang.records import IncidentUpdate
    from trainprobe.sidecar.core.hang.state import HangConfig, HangState

__all__ = [
    "CulpritPolicy",
    "Episode",
    "HangConfig",
    "HangState",
    "IncidentUpdate",
    "JobEpisodes",
    "PatienceBook",
    "Stall",
    "paused_line",
    "paused_reason",
    "plan_targets",
    "step",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CulpritPolicy": "episodes",
        "Episode": "episodes",
        "HangConfig": "state",
        "HangState": "state",
        "IncidentUpdate": "records",
        "JobEpisodes": "episodes",
        "PatienceBook": "patience",
        "Stall": "patience",
        "paused_line": "pause",
        "paused_reason": "pause",
        "plan_targets": "episodes",
        "step": "machine",
    },
)
