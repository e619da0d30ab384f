"""The sidecar's pure core: plain data, rules, thresholds, incidents, policy.

Nothing here imports gRPC, Ray or OpenTelemetry, and every function takes the
current time as an argument, so the whole decision path is unit-testable.
"""

from trainprobe.sidecar.core.culprit import Diagnosis, GroupProgress, RankSummary, analyze
from trainprobe.sidecar.core.incidents import EpisodeTracker, Incident, group_incidents
from trainprobe.sidecar.core.model import (
    CollectiveData,
    Finding,
    GpuMemoryData,
    GroupSeqData,
    HelloData,
    PhaseData,
    RayInfo,
    ReportData,
    SyncData,
    Verdict,
    WorkerKey,
    WorkerState,
)
from trainprobe.sidecar.core.policy import ACTIONS, ActionPolicy, KillBudget, decide
from trainprobe.sidecar.core.ray_kill import (
    RayKillPlan,
    actor_summary,
    kill_settled,
    plan_ray_kill,
)
from trainprobe.sidecar.core.recovery import RecoveryWatch
from trainprobe.sidecar.core.registry import SUPPORTED_PROTOCOLS, Registry, RegistryError
from trainprobe.sidecar.core.rules import JobContext, RuleConfig, evaluate, job_contexts
from trainprobe.sidecar.core.summary import summarize
from trainprobe.sidecar.core.thresholds import StallPolicy, StallThreshold, p99, stall_threshold
from trainprobe.sidecar.core.validate import ValidationError, validate_hello, validate_report

__all__ = [
    "ACTIONS",
    "SUPPORTED_PROTOCOLS",
    "ActionPolicy",
    "CollectiveData",
    "Diagnosis",
    "EpisodeTracker",
    "Finding",
    "GpuMemoryData",
    "GroupProgress",
    "GroupSeqData",
    "HelloData",
    "Incident",
    "JobContext",
    "KillBudget",
    "PhaseData",
    "RankSummary",
    "RayInfo",
    "RayKillPlan",
    "RecoveryWatch",
    "Registry",
    "RegistryError",
    "ReportData",
    "RuleConfig",
    "StallPolicy",
    "StallThreshold",
    "SyncData",
    "ValidationError",
    "Verdict",
    "WorkerKey",
    "WorkerState",
    "actor_summary",
    "analyze",
    "decide",
    "evaluate",
    "group_incidents",
    "job_contexts",
    "kill_settled",
    "p99",
    "plan_ray_kill",
    "stall_threshold",
    "summarize",
    "validate_hello",
    "validate_report",
]
