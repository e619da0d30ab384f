"""The sidecar's pure core: plain data, rules, thresholds, incidents, policy.

Nothing here imports gRPC, Ray or OpenTelemetry, and every function takes the
current time as an argument, so the whole decision path is unit-testable.
"""

from trainprobe.sidecar.core.actions import (
    ACTIONS,
    Action,
    action_record,
    eviction_line,
    for_replicas,
    is_destructive,
)
from trainprobe.sidecar.core.arrival import ArrivalTracker, LagStats, LagSummary
from trainprobe.sidecar.core.culprit import Diagnosis, GroupProgress, RankSummary, analyze
from trainprobe.sidecar.core.decision import (
    Judgement,
    judge,
    paused_line,
    paused_reason,
    refine,
    suspect_line,
)
from trainprobe.sidecar.core.episodes import (
    CulpritPolicy,
    Episode,
    JobEpisodes,
    plan_targets,
    update_record,
)
from trainprobe.sidecar.core.evidence import (
    ProcSample,
    RankEvidence,
    StackSample,
    assess,
    classify_frames,
    definitive_reason,
    stale_after_s,
)
from trainprobe.sidecar.core.incidents import (
    FindingEdges,
    Incident,
    group_incidents,
    next_incident_id,
)
from trainprobe.sidecar.core.jobview import (
    CoordinatorState,
    EpisodeNote,
    JobView,
    SyncReply,
    aged,
    analyze_job,
    merge_summaries,
)
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
    VerifiedProcess,
    WorkerKey,
    WorkerState,
    heard_every_ms,
)
from trainprobe.sidecar.core.overload import IngestLoad, Shedder
from trainprobe.sidecar.core.patience import PatienceBook, Stall
from trainprobe.sidecar.core.policy import ActionPolicy, KillBudget, decide
from trainprobe.sidecar.core.ray_kill import (
    RayKillPlan,
    actor_summary,
    kill_settled,
    plan_ray_kill,
)
from trainprobe.sidecar.core.recovery import RecoveryWatch
from trainprobe.sidecar.core.registry import SUPPORTED_PROTOCOLS, Registry, RegistryError
from trainprobe.sidecar.core.replicas import ReplicaEvidence, apply_replicas, replica_evidence
from trainprobe.sidecar.core.rules import JobContext, RuleConfig, evaluate, job_contexts
from trainprobe.sidecar.core.stackframes import Frame, ThreadStack, parse_stacks, stuck_at
from trainprobe.sidecar.core.summary import summarize
from trainprobe.sidecar.core.text import SafeLogFormatter, printable
from trainprobe.sidecar.core.thresholds import StallPolicy, StallThreshold, p99, stall_threshold
from trainprobe.sidecar.core.validate import ValidationError, validate_hello, validate_report

__all__ = [
    "ACTIONS",
    "SUPPORTED_PROTOCOLS",
    "Action",
    "ActionPolicy",
    "ArrivalTracker",
    "CollectiveData",
    "CoordinatorState",
    "CulpritPolicy",
    "Diagnosis",
    "Episode",
    "EpisodeNote",
    "Finding",
    "FindingEdges",
    "Frame",
    "GpuMemoryData",
    "GroupProgress",
    "GroupSeqData",
    "HelloData",
    "Incident",
    "IngestLoad",
    "JobContext",
    "JobEpisodes",
    "JobView",
    "Judgement",
    "KillBudget",
    "LagStats",
    "LagSummary",
    "PatienceBook",
    "PhaseData",
    "ProcSample",
    "RankEvidence",
    "RankSummary",
    "RayInfo",
    "RayKillPlan",
    "RecoveryWatch",
    "Registry",
    "RegistryError",
    "ReplicaEvidence",
    "ReportData",
    "RuleConfig",
    "SafeLogFormatter",
    "Shedder",
    "StackSample",
    "Stall",
    "StallPolicy",
    "StallThreshold",
    "SyncData",
    "SyncReply",
    "ThreadStack",
    "ValidationError",
    "Verdict",
    "VerifiedProcess",
    "WorkerKey",
    "WorkerState",
    "action_record",
    "actor_summary",
    "aged",
    "analyze",
    "analyze_job",
    "apply_replicas",
    "assess",
    "classify_frames",
    "decide",
    "definitive_reason",
    "evaluate",
    "eviction_line",
    "for_replicas",
    "group_incidents",
    "heard_every_ms",
    "is_destructive",
    "job_contexts",
    "judge",
    "kill_settled",
    "merge_summaries",
    "next_incident_id",
    "p99",
    "parse_stacks",
    "paused_line",
    "paused_reason",
    "plan_ray_kill",
    "plan_targets",
    "printable",
    "refine",
    "replica_evidence",
    "stale_after_s",
    "stall_threshold",
    "stuck_at",
    "summarize",
    "suspect_line",
    "update_record",
    "validate_hello",
    "validate_report",
]
