"""From sessions to findings and culprits: the rules, the evidence the sidecar
reads itself, stack frames, the culprit analysis (replica groups too), and the
decision to kill now or wait.

It may import ``session``, the modules at the top of ``core/`` and the standard
library, nothing else: tests/test_import_cycles.py checks it.
"""

from typing import TYPE_CHECKING

from trainprobe.sidecar.core.lazy import lazy_exports

if TYPE_CHECKING:
    from trainprobe.sidecar.core.judge.activity import classify_frames
    from trainprobe.sidecar.core.judge.culprit import Diagnosis, GroupProgress, RankSummary, analyze
    from trainprobe.sidecar.core.judge.decision import Judgement, judge, refine, suspect_line
    from trainprobe.sidecar.core.judge.evidence import (
        ProcSample,
        RankEvidence,
        StackSample,
        assess,
        definitive_reason,
        stale_after_s,
    )
    from trainprobe.sidecar.core.judge.replicas import (
        ReplicaEvidence,
        apply_replicas,
        replica_evidence,
    )
    from trainprobe.sidecar.core.judge.rules import JobContext, RuleConfig, evaluate, job_contexts
    from trainprobe.sidecar.core.judge.stackframes import Frame, ThreadStack, parse_stacks, stuck_at
    from trainprobe.sidecar.core.judge.summary import summarize

__all__ = [
    "Diagnosis",
    "Frame",
    "GroupProgress",
    "JobContext",
    "Judgement",
    "ProcSample",
    "RankEvidence",
    "RankSummary",
    "ReplicaEvidence",
    "RuleConfig",
    "StackSample",
    "ThreadStack",
    "analyze",
    "apply_replicas",
    "assess",
    "classify_frames",
    "definitive_reason",
    "evaluate",
    "job_contexts",
    "judge",
    "parse_stacks",
    "refine",
    "replica_evidence",
    "stale_after_s",
    "stuck_at",
    "summarize",
    "suspect_line",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Diagnosis": "culprit",
        "Frame": "stackframes",
        "GroupProgress": "culprit",
        "JobContext": "rules",
        "Judgement": "decision",
        "ProcSample": "evidence",
        "RankEvidence": "evidence",
        "RankSummary": "culprit",
        "ReplicaEvidence": "replicas",
        "RuleConfig": "rules",
        "StackSample": "evidence",
        "ThreadStack": "stackframes",
        "analyze": "culprit",
        "apply_replicas": "replicas",
        "assess": "evidence",
        "classify_frames": "activity",
        "definitive_reason": "evidence",
        "evaluate": "rules",
        "job_contexts": "rules",
        "judge": "decision",
        "parse_stacks": "stackframes",
        "refine": "decision",
        "replica_evidence": "replicas",
        "stale_after_s": "evidence",
        "stuck_at": "stackframes",
        "summarize": "summary",
        "suspect_line": "decision",
    },
)
