"""What a worker said: its Hello and reports as plain data, validated and folded
into its session by the registry (the one writer of a session), arrival lag,
the sidecar's own pace and load shedding.

It may import the modules at the top of ``core/`` and the standard library,
nothing else: tests/test_import_cycles.py checks it.
"""

from typing import TYPE_CHECKING

from trainprobe.sidecar.core.lazy import lazy_exports

if TYPE_CHECKING:
    from trainprobe.sidecar.core.session.arrival import ArrivalTracker, LagStats, LagSummary
    from trainprobe.sidecar.core.session.model import (
        CollectiveData,
        Finding,
        GpuMemoryData,
        GroupSeqData,
        HelloData,
        PhaseData,
        RayIds,
        ReportData,
        SyncData,
        Verdict,
        VerifiedProcess,
        WorkerKey,
        WorkerState,
        heard_every_ms,
    )
    from trainprobe.sidecar.core.session.overload import IngestLoad, Shedder
    from trainprobe.sidecar.core.session.registry import (
        SUPPORTED_PROTOCOLS,
        Registry,
        RegistryError,
    )
    from trainprobe.sidecar.core.session.thresholds import (
        StallPolicy,
        StallThreshold,
        p99,
        stall_threshold,
    )
    from trainprobe.sidecar.core.session.validate import (
        ValidationError,
        validate_hello,
        validate_report,
    )

__all__ = [
    "SUPPORTED_PROTOCOLS",
    "ArrivalTracker",
    "CollectiveData",
    "Finding",
    "GpuMemoryData",
    "GroupSeqData",
    "HelloData",
    "IngestLoad",
    "LagStats",
    "LagSummary",
    "PhaseData",
    "RayIds",
    "Registry",
    "RegistryError",
    "ReportData",
    "Shedder",
    "StallPolicy",
    "StallThreshold",
    "SyncData",
    "ValidationError",
    "Verdict",
    "VerifiedProcess",
    "WorkerKey",
    "WorkerState",
    "heard_every_ms",
    "p99",
    "stall_threshold",
    "validate_hello",
    "validate_report",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ArrivalTracker": "arrival",
        "CollectiveData": "model",
        "Finding": "model",
        "GpuMemoryData": "model",
        "GroupSeqData": "model",
        "HelloData": "model",
        "IngestLoad": "overload",
        "LagStats": "arrival",
        "LagSummary": "arrival",
        "PhaseData": "model",
        "RayIds": "model",
        "Registry": "registry",
        "RegistryError": "registry",
        "ReportData": "model",
        "SUPPORTED_PROTOCOLS": "registry",
        "Shedder": "overload",
        "StallPolicy": "thresholds",
        "StallThreshold": "thresholds",
        "SyncData": "model",
        "ValidationError": "validate",
        "Verdict": "model",
        "VerifiedProcess": "model",
        "WorkerKey": "model",
        "WorkerState": "model",
        "heard_every_ms": "model",
        "p99": "thresholds",
        "stall_threshold": "thresholds",
        "validate_hello": "validate",
        "validate_report": "validate",
    },
)
