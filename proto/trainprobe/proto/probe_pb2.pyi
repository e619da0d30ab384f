from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HeldHow(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HELD_NONE: _ClassVar[HeldHow]
    HELD_STOPPED: _ClassVar[HeldHow]
    HELD_TRACED: _ClassVar[HeldHow]
    HELD_FROZEN: _ClassVar[HeldHow]
HELD_NONE: HeldHow
HELD_STOPPED: HeldHow
HELD_TRACED: HeldHow
HELD_FROZEN: HeldHow

class WorkerMessage(_message.Message):
    __slots__ = ("hello", "report", "goodbye", "command_result")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    GOODBYE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_RESULT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    report: Report
    goodbye: Goodbye
    command_result: CommandResult
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., report: _Optional[_Union[Report, _Mapping]] = ..., goodbye: _Optional[_Union[Goodbye, _Mapping]] = ..., command_result: _Optional[_Union[CommandResult, _Mapping]] = ...) -> None: ...

class RayIdentity(_message.Message):
    __slots__ = ("job_id", "node_id", "actor_id", "worker_id", "trial_or_run_name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_OR_RUN_NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    node_id: str
    actor_id: str
    worker_id: str
    trial_or_run_name: str
    def __init__(self, job_id: _Optional[str] = ..., node_id: _Optional[str] = ..., actor_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., trial_or_run_name: _Optional[str] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "hook_version", "job_id", "rank", "local_rank", "world_size", "host", "pid", "interval_ms", "ray", "gpu_uuid", "cuda_device", "labels", "stack_signal", "stack_file", "thread_id", "thread_native_id", "identity_ticket", "session_secret", "job_name", "replica", "startup_watch")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    HOOK_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    RAY_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    CUDA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STACK_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STACK_FILE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NATIVE_ID_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_TICKET_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    STARTUP_WATCH_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    hook_version: str
    job_id: str
    rank: int
    local_rank: int
    world_size: int
    host: str
    pid: int
    interval_ms: int
    ray: RayIdentity
    gpu_uuid: str
    cuda_device: int
    labels: _containers.ScalarMap[str, str]
    stack_signal: int
    stack_file: str
    thread_id: int
    thread_native_id: int
    identity_ticket: bytes
    session_secret: bytes
    job_name: str
    replica: ReplicaIdentity
    startup_watch: bool
    def __init__(self, protocol_version: _Optional[int] = ..., hook_version: _Optional[str] = ..., job_id: _Optional[str] = ..., rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., interval_ms: _Optional[int] = ..., ray: _Optional[_Union[RayIdentity, _Mapping]] = ..., gpu_uuid: _Optional[str] = ..., cuda_device: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., stack_signal: _Optional[int] = ..., stack_file: _Optional[str] = ..., thread_id: _Optional[int] = ..., thread_native_id: _Optional[int] = ..., identity_ticket: _Optional[bytes] = ..., session_secret: _Optional[bytes] = ..., job_name: _Optional[str] = ..., replica: _Optional[_Union[ReplicaIdentity, _Mapping]] = ..., startup_watch: bool = ...) -> None: ...

class ReplicaIdentity(_message.Message):
    __slots__ = ("replica_id", "group_rank", "group_world_size")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_RANK_FIELD_NUMBER: _ClassVar[int]
    GROUP_WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    group_rank: int
    group_world_size: int
    def __init__(self, replica_id: _Optional[str] = ..., group_rank: _Optional[int] = ..., group_world_size: _Optional[int] = ...) -> None: ...

class ReplicaProgress(_message.Message):
    __slots__ = ("quorum_id", "step", "participants", "waiting", "waiting_since_mono_ns", "errored")
    QUORUM_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    WAITING_SINCE_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    ERRORED_FIELD_NUMBER: _ClassVar[int]
    quorum_id: int
    step: int
    participants: int
    waiting: str
    waiting_since_mono_ns: int
    errored: bool
    def __init__(self, quorum_id: _Optional[int] = ..., step: _Optional[int] = ..., participants: _Optional[int] = ..., waiting: _Optional[str] = ..., waiting_since_mono_ns: _Optional[int] = ..., errored: bool = ...) -> None: ...

class StepStats(_message.Message):
    __slots__ = ("count", "sum_s", "max_s")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SUM_S_FIELD_NUMBER: _ClassVar[int]
    MAX_S_FIELD_NUMBER: _ClassVar[int]
    count: int
    sum_s: float
    max_s: float
    def __init__(self, count: _Optional[int] = ..., sum_s: _Optional[float] = ..., max_s: _Optional[float] = ...) -> None: ...

class Phase(_message.Message):
    __slots__ = ("name", "start_mono_ns", "timeout_s", "end_mono_ns")
    NAME_FIELD_NUMBER: _ClassVar[int]
    START_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    END_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    name: str
    start_mono_ns: int
    timeout_s: float
    end_mono_ns: int
    def __init__(self, name: _Optional[str] = ..., start_mono_ns: _Optional[int] = ..., timeout_s: _Optional[float] = ..., end_mono_ns: _Optional[int] = ...) -> None: ...

class GpuMemory(_message.Message):
    __slots__ = ("device_index", "allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "has_nvml", "device_used_bytes", "device_total_bytes", "process_used_bytes", "device_uuid")
    DEVICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HAS_NVML_FIELD_NUMBER: _ClassVar[int]
    DEVICE_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_UUID_FIELD_NUMBER: _ClassVar[int]
    device_index: int
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    has_nvml: bool
    device_used_bytes: int
    device_total_bytes: int
    process_used_bytes: int
    device_uuid: str
    def __init__(self, device_index: _Optional[int] = ..., allocated_bytes: _Optional[int] = ..., reserved_bytes: _Optional[int] = ..., peak_allocated_bytes: _Optional[int] = ..., has_nvml: bool = ..., device_used_bytes: _Optional[int] = ..., device_total_bytes: _Optional[int] = ..., process_used_bytes: _Optional[int] = ..., device_uuid: _Optional[str] = ...) -> None: ...

class GroupSeq(_message.Message):
    __slots__ = ("group", "issued", "completed", "oldest_inflight_start_mono_ns", "inflight_op", "inflight_seq", "started_seqs", "started_mono_ns")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ISSUED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_INFLIGHT_START_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_OP_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_SEQ_FIELD_NUMBER: _ClassVar[int]
    STARTED_SEQS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    group: str
    issued: int
    completed: int
    oldest_inflight_start_mono_ns: int
    inflight_op: str
    inflight_seq: int
    started_seqs: _containers.RepeatedScalarFieldContainer[int]
    started_mono_ns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, group: _Optional[str] = ..., issued: _Optional[int] = ..., completed: _Optional[int] = ..., oldest_inflight_start_mono_ns: _Optional[int] = ..., inflight_op: _Optional[str] = ..., inflight_seq: _Optional[int] = ..., started_seqs: _Optional[_Iterable[int]] = ..., started_mono_ns: _Optional[_Iterable[int]] = ...) -> None: ...

class CollectiveSample(_message.Message):
    __slots__ = ("group", "seq", "op", "bytes", "start_mono_ns", "end_mono_ns", "step")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    START_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    END_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    group: str
    seq: int
    op: str
    bytes: int
    start_mono_ns: int
    end_mono_ns: int
    step: int
    def __init__(self, group: _Optional[str] = ..., seq: _Optional[int] = ..., op: _Optional[str] = ..., bytes: _Optional[int] = ..., start_mono_ns: _Optional[int] = ..., end_mono_ns: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class SyncStats(_message.Message):
    __slots__ = ("count", "p50_s", "max_s", "bytes", "sum_s", "groups", "samples")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    P50_S_FIELD_NUMBER: _ClassVar[int]
    MAX_S_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SUM_S_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    count: int
    p50_s: float
    max_s: float
    bytes: int
    sum_s: float
    groups: _containers.RepeatedCompositeFieldContainer[GroupSeq]
    samples: _containers.RepeatedCompositeFieldContainer[CollectiveSample]
    def __init__(self, count: _Optional[int] = ..., p50_s: _Optional[float] = ..., max_s: _Optional[float] = ..., bytes: _Optional[int] = ..., sum_s: _Optional[float] = ..., groups: _Optional[_Iterable[_Union[GroupSeq, _Mapping]]] = ..., samples: _Optional[_Iterable[_Union[CollectiveSample, _Mapping]]] = ...) -> None: ...

class Report(_message.Message):
    __slots__ = ("seq", "mono_ns", "wall_ns", "has_step", "last_step", "last_step_mono_ns", "step_stats", "active_phases", "finished_phases", "dropped_reports", "recent_steps", "recent_step_end_mono_ns", "recent_step_s", "total_steps", "gpu_memory", "sync", "replica")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MONO_NS_FIELD_NUMBER: _ClassVar[int]
    WALL_NS_FIELD_NUMBER: _ClassVar[int]
    HAS_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    STEP_STATS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PHASES_FIELD_NUMBER: _ClassVar[int]
    FINISHED_PHASES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_REPORTS_FIELD_NUMBER: _ClassVar[int]
    RECENT_STEPS_FIELD_NUMBER: _ClassVar[int]
    RECENT_STEP_END_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    RECENT_STEP_S_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_FIELD_NUMBER: _ClassVar[int]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    seq: int
    mono_ns: int
    wall_ns: int
    has_step: bool
    last_step: int
    last_step_mono_ns: int
    step_stats: StepStats
    active_phases: _containers.RepeatedCompositeFieldContainer[Phase]
    finished_phases: _containers.RepeatedCompositeFieldContainer[Phase]
    dropped_reports: int
    recent_steps: _containers.RepeatedScalarFieldContainer[int]
    recent_step_end_mono_ns: _containers.RepeatedScalarFieldContainer[int]
    recent_step_s: _containers.RepeatedScalarFieldContainer[float]
    total_steps: int
    gpu_memory: GpuMemory
    sync: SyncStats
    replica: ReplicaProgress
    def __init__(self, seq: _Optional[int] = ..., mono_ns: _Optional[int] = ..., wall_ns: _Optional[int] = ..., has_step: bool = ..., last_step: _Optional[int] = ..., last_step_mono_ns: _Optional[int] = ..., step_stats: _Optional[_Union[StepStats, _Mapping]] = ..., active_phases: _Optional[_Iterable[_Union[Phase, _Mapping]]] = ..., finished_phases: _Optional[_Iterable[_Union[Phase, _Mapping]]] = ..., dropped_reports: _Optional[int] = ..., recent_steps: _Optional[_Iterable[int]] = ..., recent_step_end_mono_ns: _Optional[_Iterable[int]] = ..., recent_step_s: _Optional[_Iterable[float]] = ..., total_steps: _Optional[int] = ..., gpu_memory: _Optional[_Union[GpuMemory, _Mapping]] = ..., sync: _Optional[_Union[SyncStats, _Mapping]] = ..., replica: _Optional[_Union[ReplicaProgress, _Mapping]] = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ("command_id", "ok", "error", "python_stacks", "flight_recorder_json", "method")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PYTHON_STACKS_FIELD_NUMBER: _ClassVar[int]
    FLIGHT_RECORDER_JSON_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    command_id: int
    ok: bool
    error: str
    python_stacks: str
    flight_recorder_json: str
    method: str
    def __init__(self, command_id: _Optional[int] = ..., ok: bool = ..., error: _Optional[str] = ..., python_stacks: _Optional[str] = ..., flight_recorder_json: _Optional[str] = ..., method: _Optional[str] = ...) -> None: ...

class Goodbye(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class DumpStacks(_message.Message):
    __slots__ = ("include_flight_recorder",)
    INCLUDE_FLIGHT_RECORDER_FIELD_NUMBER: _ClassVar[int]
    include_flight_recorder: bool
    def __init__(self, include_flight_recorder: bool = ...) -> None: ...

class Abort(_message.Message):
    __slots__ = ("reason", "grace_s")
    REASON_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    reason: str
    grace_s: float
    def __init__(self, reason: _Optional[str] = ..., grace_s: _Optional[float] = ...) -> None: ...

class Notice(_message.Message):
    __slots__ = ("incident_id", "job_id", "killed_ranks", "verdict", "rule", "reason", "evicted_replica", "replicas_left")
    INCIDENT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KILLED_RANKS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EVICTED_REPLICA_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_LEFT_FIELD_NUMBER: _ClassVar[int]
    incident_id: str
    job_id: str
    killed_ranks: _containers.RepeatedScalarFieldContainer[int]
    verdict: str
    rule: str
    reason: str
    evicted_replica: str
    replicas_left: int
    def __init__(self, incident_id: _Optional[str] = ..., job_id: _Optional[str] = ..., killed_ranks: _Optional[_Iterable[int]] = ..., verdict: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., evicted_replica: _Optional[str] = ..., replicas_left: _Optional[int] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("id", "dump_stacks", "abort", "notice")
    ID_FIELD_NUMBER: _ClassVar[int]
    DUMP_STACKS_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    id: int
    dump_stacks: DumpStacks
    abort: Abort
    notice: Notice
    def __init__(self, id: _Optional[int] = ..., dump_stacks: _Optional[_Union[DumpStacks, _Mapping]] = ..., abort: _Optional[_Union[Abort, _Mapping]] = ..., notice: _Optional[_Union[Notice, _Mapping]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("job_id", "rank", "local_rank", "world_size", "host", "pid", "has_step", "step", "steps_per_s", "report_age_s", "phase", "verdict", "state", "step_age_s", "stall_threshold_s", "gpu_memory", "sync_p50_s", "sync_max_s", "groups", "ray", "gpu_uuid", "inflight_age_s", "verified", "suspect", "killed_rule", "killed_incident", "arrival_lag", "replica", "evicted", "job_name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HAS_STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    REPORT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_AGE_S_FIELD_NUMBER: _ClassVar[int]
    STALL_THRESHOLD_S_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_FIELD_NUMBER: _ClassVar[int]
    SYNC_P50_S_FIELD_NUMBER: _ClassVar[int]
    SYNC_MAX_S_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    RAY_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    SUSPECT_FIELD_NUMBER: _ClassVar[int]
    KILLED_RULE_FIELD_NUMBER: _ClassVar[int]
    KILLED_INCIDENT_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_LAG_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    local_rank: int
    world_size: int
    host: str
    pid: int
    has_step: bool
    step: int
    steps_per_s: float
    report_age_s: float
    phase: str
    verdict: str
    state: str
    step_age_s: float
    stall_threshold_s: float
    gpu_memory: GpuMemory
    sync_p50_s: float
    sync_max_s: float
    groups: _containers.RepeatedCompositeFieldContainer[GroupSeq]
    ray: RayIdentity
    gpu_uuid: str
    inflight_age_s: float
    verified: bool
    suspect: str
    killed_rule: str
    killed_incident: str
    arrival_lag: ArrivalLag
    replica: str
    evicted: bool
    job_name: str
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., has_step: bool = ..., step: _Optional[int] = ..., steps_per_s: _Optional[float] = ..., report_age_s: _Optional[float] = ..., phase: _Optional[str] = ..., verdict: _Optional[str] = ..., state: _Optional[str] = ..., step_age_s: _Optional[float] = ..., stall_threshold_s: _Optional[float] = ..., gpu_memory: _Optional[_Union[GpuMemory, _Mapping]] = ..., sync_p50_s: _Optional[float] = ..., sync_max_s: _Optional[float] = ..., groups: _Optional[_Iterable[_Union[GroupSeq, _Mapping]]] = ..., ray: _Optional[_Union[RayIdentity, _Mapping]] = ..., gpu_uuid: _Optional[str] = ..., inflight_age_s: _Optional[float] = ..., verified: bool = ..., suspect: _Optional[str] = ..., killed_rule: _Optional[str] = ..., killed_incident: _Optional[str] = ..., arrival_lag: _Optional[_Union[ArrivalLag, _Mapping]] = ..., replica: _Optional[str] = ..., evicted: bool = ..., job_name: _Optional[str] = ...) -> None: ...

class ArrivalLag(_message.Message):
    __slots__ = ("count", "last_s", "p50_s", "p99_s", "max_s", "missed", "group")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_S_FIELD_NUMBER: _ClassVar[int]
    P50_S_FIELD_NUMBER: _ClassVar[int]
    P99_S_FIELD_NUMBER: _ClassVar[int]
    MAX_S_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    count: int
    last_s: float
    p50_s: float
    p99_s: float
    max_s: float
    missed: int
    group: str
    def __init__(self, count: _Optional[int] = ..., last_s: _Optional[float] = ..., p50_s: _Optional[float] = ..., p99_s: _Optional[float] = ..., max_s: _Optional[float] = ..., missed: _Optional[int] = ..., group: _Optional[str] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("workers", "sidecar_version", "node", "omitted", "ray_watch", "ingest", "job_sync", "job_sync_hub")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    SIDECAR_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    RAY_WATCH_FIELD_NUMBER: _ClassVar[int]
    INGEST_FIELD_NUMBER: _ClassVar[int]
    JOB_SYNC_FIELD_NUMBER: _ClassVar[int]
    JOB_SYNC_HUB_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    sidecar_version: str
    node: str
    omitted: int
    ray_watch: RayWatchStatus
    ingest: IngestStatus
    job_sync: JobSyncLinkStatus
    job_sync_hub: JobSyncHubStatus
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., sidecar_version: _Optional[str] = ..., node: _Optional[str] = ..., omitted: _Optional[int] = ..., ray_watch: _Optional[_Union[RayWatchStatus, _Mapping]] = ..., ingest: _Optional[_Union[IngestStatus, _Mapping]] = ..., job_sync: _Optional[_Union[JobSyncLinkStatus, _Mapping]] = ..., job_sync_hub: _Optional[_Union[JobSyncHubStatus, _Mapping]] = ...) -> None: ...

class JobSyncLinkStatus(_message.Message):
    __slots__ = ("upstream", "connected", "state_age_s", "last_error", "last_answer_age_s", "jobs_detailed", "jobs_digest", "sent", "received", "sessions", "skipped", "lost", "lost_after_s")
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    STATE_AGE_S_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ANSWER_AGE_S_FIELD_NUMBER: _ClassVar[int]
    JOBS_DETAILED_FIELD_NUMBER: _ClassVar[int]
    JOBS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SENT_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    LOST_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    upstream: str
    connected: bool
    state_age_s: float
    last_error: str
    last_answer_age_s: float
    jobs_detailed: int
    jobs_digest: int
    sent: int
    received: int
    sessions: int
    skipped: int
    lost: bool
    lost_after_s: float
    def __init__(self, upstream: _Optional[str] = ..., connected: bool = ..., state_age_s: _Optional[float] = ..., last_error: _Optional[str] = ..., last_answer_age_s: _Optional[float] = ..., jobs_detailed: _Optional[int] = ..., jobs_digest: _Optional[int] = ..., sent: _Optional[int] = ..., received: _Optional[int] = ..., sessions: _Optional[int] = ..., skipped: _Optional[int] = ..., lost: bool = ..., lost_after_s: _Optional[float] = ...) -> None: ...

class JobSyncHubStatus(_message.Message):
    __slots__ = ("nodes", "jobs", "ranks", "refused", "missed_pushes")
    NODES_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    MISSED_PUSHES_FIELD_NUMBER: _ClassVar[int]
    nodes: int
    jobs: int
    ranks: int
    refused: int
    missed_pushes: int
    def __init__(self, nodes: _Optional[int] = ..., jobs: _Optional[int] = ..., ranks: _Optional[int] = ..., refused: _Optional[int] = ..., missed_pushes: _Optional[int] = ...) -> None: ...

class IngestStatus(_message.Message):
    __slots__ = ("overloaded", "applied", "shed", "max_lag_s", "shed_per_s", "behind", "own_lag_s", "deferred_now", "deferred")
    OVERLOADED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    SHED_FIELD_NUMBER: _ClassVar[int]
    MAX_LAG_S_FIELD_NUMBER: _ClassVar[int]
    SHED_PER_S_FIELD_NUMBER: _ClassVar[int]
    BEHIND_FIELD_NUMBER: _ClassVar[int]
    OWN_LAG_S_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_NOW_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    overloaded: bool
    applied: int
    shed: int
    max_lag_s: float
    shed_per_s: float
    behind: bool
    own_lag_s: float
    deferred_now: int
    deferred: int
    def __init__(self, overloaded: bool = ..., applied: _Optional[int] = ..., shed: _Optional[int] = ..., max_lag_s: _Optional[float] = ..., shed_per_s: _Optional[float] = ..., behind: bool = ..., own_lag_s: _Optional[float] = ..., deferred_now: _Optional[int] = ..., deferred: _Optional[int] = ...) -> None: ...

class RayWatchStatus(_message.Message):
    __slots__ = ("snapshots", "last_snapshot_age_s", "truncated", "errors", "findings", "cpu_s")
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    CPU_S_FIELD_NUMBER: _ClassVar[int]
    snapshots: int
    last_snapshot_age_s: float
    truncated: _containers.RepeatedScalarFieldContainer[str]
    errors: _containers.RepeatedScalarFieldContainer[str]
    findings: _containers.RepeatedCompositeFieldContainer[RayFindingStatus]
    cpu_s: float
    def __init__(self, snapshots: _Optional[int] = ..., last_snapshot_age_s: _Optional[float] = ..., truncated: _Optional[_Iterable[str]] = ..., errors: _Optional[_Iterable[str]] = ..., findings: _Optional[_Iterable[_Union[RayFindingStatus, _Mapping]]] = ..., cpu_s: _Optional[float] = ...) -> None: ...

class RayFindingStatus(_message.Message):
    __slots__ = ("rule", "key", "job_id", "text", "at", "incident_id", "action")
    RULE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    INCIDENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    rule: str
    key: str
    job_id: str
    text: str
    at: float
    incident_id: str
    action: str
    def __init__(self, rule: _Optional[str] = ..., key: _Optional[str] = ..., job_id: _Optional[str] = ..., text: _Optional[str] = ..., at: _Optional[float] = ..., incident_id: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class DiagnoseRequest(_message.Message):
    __slots__ = ("job_id", "ray", "dot")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RAY_FIELD_NUMBER: _ClassVar[int]
    DOT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ray: bool
    dot: bool
    def __init__(self, job_id: _Optional[str] = ..., ray: bool = ..., dot: bool = ...) -> None: ...

class DiagnoseReply(_message.Message):
    __slots__ = ("job_id", "text", "json", "truncated_chars")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_CHARS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    text: str
    json: str
    truncated_chars: int
    def __init__(self, job_id: _Optional[str] = ..., text: _Optional[str] = ..., json: _Optional[str] = ..., truncated_chars: _Optional[int] = ...) -> None: ...

class RelayBatch(_message.Message):
    __slots__ = ("items", "dropped_reports", "interval_ms", "held")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_REPORTS_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[RelayItem]
    dropped_reports: int
    interval_ms: int
    held: _containers.RepeatedCompositeFieldContainer[HeldWorker]
    def __init__(self, items: _Optional[_Iterable[_Union[RelayItem, _Mapping]]] = ..., dropped_reports: _Optional[int] = ..., interval_ms: _Optional[int] = ..., held: _Optional[_Iterable[_Union[HeldWorker, _Mapping]]] = ...) -> None: ...

class HeldWorker(_message.Message):
    __slots__ = ("stream_id", "how", "age_ms")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    HOW_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    how: HeldHow
    age_ms: int
    def __init__(self, stream_id: _Optional[int] = ..., how: _Optional[_Union[HeldHow, str]] = ..., age_ms: _Optional[int] = ...) -> None: ...

class RelayItem(_message.Message):
    __slots__ = ("stream_id", "message", "ended", "kill_result", "vouch")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    KILL_RESULT_FIELD_NUMBER: _ClassVar[int]
    VOUCH_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    message: bytes
    ended: StreamEnded
    kill_result: RelayKillResult
    vouch: Vouch
    def __init__(self, stream_id: _Optional[int] = ..., message: _Optional[bytes] = ..., ended: _Optional[_Union[StreamEnded, _Mapping]] = ..., kill_result: _Optional[_Union[RelayKillResult, _Mapping]] = ..., vouch: _Optional[_Union[Vouch, _Mapping]] = ...) -> None: ...

class Vouch(_message.Message):
    __slots__ = ("pid", "start_ticks", "uid")
    PID_FIELD_NUMBER: _ClassVar[int]
    START_TICKS_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    start_ticks: int
    uid: int
    def __init__(self, pid: _Optional[int] = ..., start_ticks: _Optional[int] = ..., uid: _Optional[int] = ...) -> None: ...

class StreamEnded(_message.Message):
    __slots__ = ("pid_alive",)
    PID_ALIVE_FIELD_NUMBER: _ClassVar[int]
    pid_alive: bool
    def __init__(self, pid_alive: bool = ...) -> None: ...

class RelayCommand(_message.Message):
    __slots__ = ("stream_id", "command", "kill", "reject")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    REJECT_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    command: Command
    kill: RelayKill
    reject: RelayReject
    def __init__(self, stream_id: _Optional[int] = ..., command: _Optional[_Union[Command, _Mapping]] = ..., kill: _Optional[_Union[RelayKill, _Mapping]] = ..., reject: _Optional[_Union[RelayReject, _Mapping]] = ...) -> None: ...

class RelayKill(_message.Message):
    __slots__ = ("kill_id", "grace_s")
    KILL_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    kill_id: int
    grace_s: float
    def __init__(self, kill_id: _Optional[int] = ..., grace_s: _Optional[float] = ...) -> None: ...

class RelayKillResult(_message.Message):
    __slots__ = ("kill_id", "exited", "error", "signals", "seconds", "skipped")
    KILL_ID_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    kill_id: int
    exited: bool
    error: str
    signals: _containers.RepeatedScalarFieldContainer[str]
    seconds: float
    skipped: _containers.RepeatedCompositeFieldContainer[LeftAlone]
    def __init__(self, kill_id: _Optional[int] = ..., exited: bool = ..., error: _Optional[str] = ..., signals: _Optional[_Iterable[str]] = ..., seconds: _Optional[float] = ..., skipped: _Optional[_Iterable[_Union[LeftAlone, _Mapping]]] = ...) -> None: ...

class LeftAlone(_message.Message):
    __slots__ = ("pid", "ppid", "name", "reason")
    PID_FIELD_NUMBER: _ClassVar[int]
    PPID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    pid: int
    ppid: int
    name: str
    reason: str
    def __init__(self, pid: _Optional[int] = ..., ppid: _Optional[int] = ..., name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RelayReject(_message.Message):
    __slots__ = ("code", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: str
    details: str
    def __init__(self, code: _Optional[str] = ..., details: _Optional[str] = ...) -> None: ...

class JobSyncUp(_message.Message):
    __slots__ = ("node_id", "refresh_s", "jobs")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REFRESH_S_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    refresh_s: float
    jobs: _containers.RepeatedCompositeFieldContainer[JobUpload]
    def __init__(self, node_id: _Optional[str] = ..., refresh_s: _Optional[float] = ..., jobs: _Optional[_Iterable[_Union[JobUpload, _Mapping]]] = ...) -> None: ...

class JobUpload(_message.Message):
    __slots__ = ("job_id", "ranks", "dropped", "full", "note", "detail", "since_instance", "since_version", "ended", "bounded", "closed_note")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SINCE_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    SINCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    BOUNDED_FIELD_NUMBER: _ClassVar[int]
    CLOSED_NOTE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ranks: _containers.RepeatedCompositeFieldContainer[SyncedRank]
    dropped: _containers.RepeatedScalarFieldContainer[int]
    full: bool
    note: SyncedEpisode
    detail: bool
    since_instance: str
    since_version: int
    ended: bool
    bounded: bool
    closed_note: SyncedEpisode
    def __init__(self, job_id: _Optional[str] = ..., ranks: _Optional[_Iterable[_Union[SyncedRank, _Mapping]]] = ..., dropped: _Optional[_Iterable[int]] = ..., full: bool = ..., note: _Optional[_Union[SyncedEpisode, _Mapping]] = ..., detail: bool = ..., since_instance: _Optional[str] = ..., since_version: _Optional[int] = ..., ended: bool = ..., bounded: bool = ..., closed_note: _Optional[_Union[SyncedEpisode, _Mapping]] = ...) -> None: ...

class SyncedRank(_message.Message):
    __slots__ = ("rank", "world_size", "host", "pid", "node", "reporting", "ended", "report_age_s", "has_step", "step", "step_age_s", "phases", "groups", "verdict", "replica", "ft_wait", "ft_wait_age_s", "verified", "normal_step_s", "kernel", "kernel_age_s", "held_s")
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    REPORTING_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    REPORT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    HAS_STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_AGE_S_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    FT_WAIT_FIELD_NUMBER: _ClassVar[int]
    FT_WAIT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    NORMAL_STEP_S_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    KERNEL_AGE_S_FIELD_NUMBER: _ClassVar[int]
    HELD_S_FIELD_NUMBER: _ClassVar[int]
    rank: int
    world_size: int
    host: str
    pid: int
    node: str
    reporting: bool
    ended: str
    report_age_s: float
    has_step: bool
    step: int
    step_age_s: float
    phases: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedCompositeFieldContainer[SyncedGroup]
    verdict: str
    replica: str
    ft_wait: str
    ft_wait_age_s: float
    verified: bool
    normal_step_s: float
    kernel: str
    kernel_age_s: float
    held_s: float
    def __init__(self, rank: _Optional[int] = ..., world_size: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., node: _Optional[str] = ..., reporting: bool = ..., ended: _Optional[str] = ..., report_age_s: _Optional[float] = ..., has_step: bool = ..., step: _Optional[int] = ..., step_age_s: _Optional[float] = ..., phases: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[_Union[SyncedGroup, _Mapping]]] = ..., verdict: _Optional[str] = ..., replica: _Optional[str] = ..., ft_wait: _Optional[str] = ..., ft_wait_age_s: _Optional[float] = ..., verified: bool = ..., normal_step_s: _Optional[float] = ..., kernel: _Optional[str] = ..., kernel_age_s: _Optional[float] = ..., held_s: _Optional[float] = ...) -> None: ...

class SyncedGroup(_message.Message):
    __slots__ = ("group", "issued", "completed", "in_flight", "inflight_age_s", "inflight_op", "inflight_seq")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ISSUED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_OP_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_SEQ_FIELD_NUMBER: _ClassVar[int]
    group: str
    issued: int
    completed: int
    in_flight: bool
    inflight_age_s: float
    inflight_op: str
    inflight_seq: int
    def __init__(self, group: _Optional[str] = ..., issued: _Optional[int] = ..., completed: _Optional[int] = ..., in_flight: bool = ..., inflight_age_s: _Optional[float] = ..., inflight_op: _Optional[str] = ..., inflight_seq: _Optional[int] = ...) -> None: ...

class SyncedEpisode(_message.Message):
    __slots__ = ("id", "job_id", "opened_by", "verdict", "rule", "kind", "culprits", "text", "where")
    class WhereEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OPENED_BY_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CULPRITS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    opened_by: str
    verdict: str
    rule: str
    kind: str
    culprits: _containers.RepeatedScalarFieldContainer[int]
    text: str
    where: _containers.ScalarMap[int, str]
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., opened_by: _Optional[str] = ..., verdict: _Optional[str] = ..., rule: _Optional[str] = ..., kind: _Optional[str] = ..., culprits: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., where: _Optional[_Mapping[int, str]] = ...) -> None: ...

class SyncedDigest(_message.Message):
    __slots__ = ("version", "ranks", "world_size", "reporting", "min_step", "max_step", "suspects", "suspect_ranks")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    REPORTING_FIELD_NUMBER: _ClassVar[int]
    MIN_STEP_FIELD_NUMBER: _ClassVar[int]
    MAX_STEP_FIELD_NUMBER: _ClassVar[int]
    SUSPECTS_FIELD_NUMBER: _ClassVar[int]
    SUSPECT_RANKS_FIELD_NUMBER: _ClassVar[int]
    version: int
    ranks: int
    world_size: int
    reporting: int
    min_step: int
    max_step: int
    suspects: int
    suspect_ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, version: _Optional[int] = ..., ranks: _Optional[int] = ..., world_size: _Optional[int] = ..., reporting: _Optional[int] = ..., min_step: _Optional[int] = ..., max_step: _Optional[int] = ..., suspects: _Optional[int] = ..., suspect_ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class JobSyncDown(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobReply]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobReply, _Mapping]]] = ...) -> None: ...

class JobReply(_message.Message):
    __slots__ = ("job_id", "episode", "digest", "detail", "full", "others", "gone", "since_instance", "since_version", "verdict_json")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    OTHERS_FIELD_NUMBER: _ClassVar[int]
    GONE_FIELD_NUMBER: _ClassVar[int]
    SINCE_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    SINCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERDICT_JSON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    episode: SyncedEpisode
    digest: SyncedDigest
    detail: bool
    full: bool
    others: _containers.RepeatedCompositeFieldContainer[SyncedRank]
    gone: _containers.RepeatedScalarFieldContainer[int]
    since_instance: str
    since_version: int
    verdict_json: str
    def __init__(self, job_id: _Optional[str] = ..., episode: _Optional[_Union[SyncedEpisode, _Mapping]] = ..., digest: _Optional[_Union[SyncedDigest, _Mapping]] = ..., detail: bool = ..., full: bool = ..., others: _Optional[_Iterable[_Union[SyncedRank, _Mapping]]] = ..., gone: _Optional[_Iterable[int]] = ..., since_instance: _Optional[str] = ..., since_version: _Optional[int] = ..., verdict_json: _Optional[str] = ...) -> None: ...
