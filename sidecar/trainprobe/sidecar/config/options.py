"""Every sidecar option, declared once: name, parser, doc, section.

The table drives parsing (TOML, environment, flags), ``--help`` and
docs/CONFIG.md. The typed values live in :class:`~trainprobe.sidecar.config.settings.Settings`,
whose fields must match this table one for one (a test checks it).
"""

from __future__ import annotations

from trainprobe.sidecar.config import parsers as v
from trainprobe.sidecar.config.integration_options import INTEGRATION_OPTIONS
from trainprobe.sidecar.config.option import ACTIONS_SECTION as _A
from trainprobe.sidecar.config.option import ENV_PREFIX, Option
from trainprobe.sidecar.config.option import RULES as _R
from trainprobe.sidecar.config.option import SERVING as _S
from trainprobe.sidecar.core.hang.episodes import INCONCLUSIVE_CHOICES
from trainprobe.sidecar.core.hang.patience import REPLICA_FLOOR_S
from trainprobe.sidecar.core.incident.actions import ACTIONS, DEGRADED_ACTIONS

__all__ = ["ENV_PREFIX", "OPTIONS", "OPTIONS_BY_NAME", "Option"]

_CORE: tuple[Option, ...] = (
    Option(
        "listen",
        v.endpoints,
        "Address to serve: unix:///abs/path or tcp://host:port. "
        "Repeat the flag (or comma-separate in env) for several.",
        _S,
        default_text="unix://<tmp>/trainprobe-<uid>/sidecar.sock",
        repeatable=True,
    ),
    Option(
        "token",
        v.optional_text,
        "Bearer token that TCP clients must send (hooks read TRAINPROBE_TOKEN too).",
        _S,
        default_text="none",
        secret=True,
    ),
    Option(
        "token_file",
        v.optional_path,
        "File whose first line is the bearer token: unlike --token, it does not show in "
        "ps. Refused if group or others can read it (chmod 600). Not with --token.",
        _S,
        default_text="none",
    ),
    Option(
        "insecure",
        v.boolean,
        "Allow TCP listeners without a token, and a tcp:// relay_to without TLS.",
        _S,
    ),
    Option(
        "tls_cert_file",
        v.optional_path,
        "PEM certificate (chain) that every TCP listener serves TLS with; with tls_key_file. "
        "Relay nodes pin it (relay_tls_cert_file), and so does `trainprobe --tls-cert-file`; "
        "hooks speak plain TCP, so let them reach a TLS upstream through their node. It must "
        "name the host that clients dial (subjectAltName).",
        _S,
        default_text="none: plain TCP",
    ),
    Option(
        "tls_key_file",
        v.optional_path,
        "Private key of tls_cert_file (PEM). Refused if group or others can read it.",
        _S,
        default_text="none",
    ),
    Option(
        "socket_access",
        v.choice("user", "group", "all"),
        "Who may connect to the Unix sockets: user (socket 0600, directory 0700), group "
        "(0660, 0710: this user's group) or all (0666, 0711: workers of any uid, e.g. a "
        "trainer container of another UID in the pod). Beyond user, every worker must be "
        "verified (the identity ticket of its own pid), and a job belongs to the uid of its "
        "verified ranks.",
        _S,
    ),
    Option(
        "state_dir",
        v.path,
        "Directory for the incident log and trace files.",
        _S,
        default_text="$XDG_STATE_HOME/trainprobe or ~/.local/state/trainprobe",
    ),
    Option(
        "incident_log",
        v.optional_path,
        "Incident log, JSON Lines, append-only, fsync'd.",
        _S,
        default_text="<state_dir>/incidents.jsonl",
    ),
    Option(
        "incident_log_max_bytes",
        v.integer(0, 1 << 40),
        "Rotate the incident log before a record would take it past this many bytes: "
        "incidents.jsonl becomes incidents.jsonl.1 (.1 becomes .2, ...), between two "
        "records, on the log's writer thread. 0: never rotate.",
        _S,
        default_text="67108864 (64 MiB)",
    ),
    Option(
        "incident_log_keep",
        v.integer(1, 1000),
        "Rotated incident logs kept (incidents.jsonl.1 .. .N); the oldest beyond go. "
        "`trainprobe incidents` and `report` read them all, oldest first.",
        _S,
    ),
    Option("log_level", v.choice("debug", "info", "warning", "error"), "Log verbosity.", _S),
    Option("tick_interval_ms", v.integer(10, 100), "How often the rules run, in ms.", _S),
    Option(
        "settle_s",
        v.seconds(0, 60),
        "After the sidecar starts, how long it waits before the rules first run, so that "
        "the hooks of jobs already running (after a sidecar restart) are all back: they "
        "reconnect within a second, and a hang judged with only some ranks back would "
        "name the wrong culprit.",
        _S,
    ),
    Option(
        "engine_stall_s",
        v.seconds(0.5, 3600),
        'The gRPC health service reports the sidecar itself (service "") NOT_SERVING '
        "when its rules have not completed a tick for this long.",
        _S,
    ),
    Option(
        "heartbeat_timeout_s",
        v.seconds(0.1, 86400),
        "UNRESPONSIVE after this long without a report (never less than 3 report intervals).",
        _R,
    ),
    Option(
        "stall_timeout_s",
        v.auto_or_seconds(0.1, 86400),
        "HUNG when the step has not "
        "advanced this long outside a phase. 'auto' = max(stall_floor_s, "
        "stall_p99_factor x p99 step time) after stall_warmup_steps steps.",
        _R,
        default_text="auto",
    ),
    Option(
        "stall_floor_s",
        v.seconds(0.1, 86400),
        "Lower bound of the auto stall threshold (a verdict: the kill waits for definitive "
        "evidence or hang_patience_s).",
        _R,
    ),
    Option(
        "stall_p99_factor",
        v.number(1, 1000),
        "Multiple of the p99 step time in the auto stall threshold.",
        _R,
    ),
    Option(
        "stall_warmup_steps",
        v.integer(1, 1_000_000),
        "Step times observed before "
        "'auto' applies; until then startup_timeout_s is the stall limit.",
        _R,
    ),
    Option(
        "startup_timeout_s",
        v.seconds(0.1, 604800),
        "HUNG if the first step has not completed this long after the worker connected; "
        "also the least patience before a start-up hang (rule startup_straggler) is killed.",
        _R,
    ),
    Option(
        "init_straggler_s",
        v.seconds(0.1, 604800),
        "HUNG (rule init_straggler) if a rank has not reached init_process_group this long "
        "after the last of its peers arrived there (needs the hook made before it); past "
        "the process group, HUNG (rule startup_straggler) if a rank before its first step "
        "is in no collective this long after the last of its peers began waiting in their "
        "first one (its kill waits startup_timeout_s from when they began waiting).",
        _R,
    ),
    Option(
        "rendezvous_timeout_s",
        v.seconds(0.1, 604800),
        "HUNG (rule rendezvous) if every rank of a job is inside init_process_group and "
        "none came out this long after the last arrived.",
        _R,
    ),
    Option(
        "phase_timeout_s",
        v.seconds(0.1, 604800),
        "Limit for a phase declared without timeout_s.",
        _R,
    ),
    Option(
        "gpu_memory_ratio",
        v.ratio,
        "DEGRADED when device memory used/total reaches "
        "this for gpu_memory_reports reports in a row.",
        _R,
    ),
    Option(
        "gpu_memory_reports",
        v.integer(1, 1000),
        "Consecutive NVML samples (hooks take one a second at most) at or over "
        "gpu_memory_ratio that make a gpu_memory finding.",
        _R,
    ),
    Option(
        "sync_latency_s",
        v.seconds(0.001, 86400),
        "DEGRADED when a report window's slowest gradient sync exceeds this, not counting "
        "its wait for a late peer (that rank's stall is judged, not the waiter).",
        _R,
    ),
    Option(
        "sync_timeout_s",
        v.seconds(0.1, 86400),
        "HUNG when a collective has been in flight this long outside a phase (a verdict: "
        "the kill waits for definitive evidence or hang_patience_s).",
        _R,
    ),
    Option(
        "on_hung",
        v.choice(*ACTIONS),
        "Action for HUNG verdicts. restart = kill so that the orchestrator starts the "
        "worker again (Ray Train: the worker group, from the latest checkpoint).",
        _A,
    ),
    Option("on_unresponsive", v.choice(*ACTIONS), "Action for UNRESPONSIVE verdicts.", _A),
    Option("on_degraded", v.choice(*DEGRADED_ACTIONS), "Action for DEGRADED verdicts.", _A),
    Option("dry_run", v.boolean, "Log every action instead of doing it.", _A),
    Option(
        "kill_grace_s",
        v.seconds(0, 600),
        "Seconds between SIGTERM and SIGKILL; 0.5 s at most for a process that catches "
        "SIGTERM (Lightning, HF): a hung rank never runs its handler.",
        _A,
    ),
    Option(
        "max_kills_per_hour",
        v.integer(0, 100_000),
        "Most kill/restart actions per job in any hour; beyond it incidents are only observed.",
        _A,
    ),
    Option(
        "on_inconclusive",
        v.choice(*INCONCLUSIVE_CHOICES),
        "When a hang's culprit analysis names no rank (every rank waits in one collective, "
        "no collective data): kill_stalled = the on_hung/on_unresponsive action hits every "
        "stalled rank; observe = only the incident.",
        _A,
    ),
    Option(
        "hang_patience_s",
        v.auto_or_seconds(0, 604800),
        "How long a hang whose evidence is ambiguous (the culprit sleeps, reads, waits on a "
        "lock, computes, or is silent) is watched before a kill or restart; the verdict, "
        "culprit, diagnosis and a dump or observe action come at once. Definitive evidence "
        "(a stopped, zombie or vanished culprit, mismatched collectives) acts at once. "
        "'auto' = max(90 s, 2 x the longest stall of the job that ended by itself); "
        "0 = act at the verdict.",
        _A,
        default_text="auto",
    ),
    Option(
        "replica_patience_s",
        v.auto_or_seconds(0, 604800),
        "hang_patience_s for a replicated (torchft) job whose culprit replica group is "
        "named: its action is to evict that group while the others go on, which costs one "
        "replica's restart, not the job's. "
        f"'auto' = max({REPLICA_FLOOR_S:g} s, 2 x the longest stall of the "
        "job that ended by itself), before torchft's own timeouts (30-60 s) end the step; "
        "a replica evicted again at the same place waits 2x longer each time (at most 600 s).",
        _A,
        default_text="auto",
    ),
    Option(
        "job_kill_grace_s",
        v.seconds(0, 3600),
        "After a hang's culprits are killed, the job's other ranks that are still alive and "
        "have not stepped since are killed this many seconds later (Ray Train usually ends "
        "them first).",
        _A,
    ),
    Option(
        "stack_timeout_s",
        v.seconds(0.05, 60),
        "How long a culprit's hook has to send its Python stacks before the sidecar reads "
        "them from outside (py-spy, then the hook's faulthandler signal). A stopped "
        "process, or one whose reporter has missed 3 reports, is read from outside first.",
        _A,
    ),
)
#: Every option, in the order of --help and docs/CONFIG.md.
OPTIONS: tuple[Option, ...] = (*_CORE, *INTEGRATION_OPTIONS)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}
