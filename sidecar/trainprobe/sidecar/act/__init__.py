"""Acting on a decision: killers, process facts and signals, stack reading,
and the incident log.

Public API (imported on first use):

- :class:`Actions`: runs an incident's action and logs its ``action`` record.
- :class:`Killer`, :class:`SignalKiller`: how a worker's process is made to go.
- :class:`StackCollector`: a rank's Python stacks, in-process or from outside.
- :class:`EvidenceGatherer`: a suspect job's /proc and stack samples, round by round.
- :class:`IncidentLog`, :func:`read_incident_log`: the append-only JSON Lines log.
- :func:`terminate`, :func:`pid_alive`, :func:`proc_start_ticks`,
  :func:`proc_stopped`, :class:`KillOutcome`: facts from /proc and signals.
- :func:`protected_pid`: why a pid must never be signalled (init, this
  sidecar, its ancestors).
"""

from trainprobe.sidecar.core.lazy import lazy_exports

__all__ = [
    "Actions",
    "EvidenceGatherer",
    "IncidentLog",
    "IncidentLogError",
    "KillOutcome",
    "Killer",
    "KillerFactory",
    "RecoveryLog",
    "SignalKiller",
    "StackCollector",
    "pid_alive",
    "proc_sample",
    "proc_start_ticks",
    "proc_stopped",
    "protected_pid",
    "read_incident_log",
    "terminate",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Actions": "actions",
        "EvidenceGatherer": "evidence",
        "RecoveryLog": "actions",
        "IncidentLog": "incident_log",
        "IncidentLogError": "incident_log",
        "read_incident_log": "incident_log",
        "KillOutcome": "signals",
        "pid_alive": "procs",
        "proc_start_ticks": "procs",
        "proc_stopped": "procs",
        "proc_sample": "procs",
        "protected_pid": "procs",
        "terminate": "signals",
        "Killer": "killers",
        "KillerFactory": "killers",
        "SignalKiller": "killers",
        "StackCollector": "stacks",
    },
)
