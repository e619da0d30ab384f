"""Every sidecar option, declared once: name, parser, doc, section.

The table drives parsing (TOML, environment, flags), ``--help`` and
docs/CONFIG.md. The typed values live in :class:`~trainprobe.sidecar.config.settings.Settings`,
whose fields must match this table one for one (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainprobe.sidecar.config import parsers as v
from trainprobe.sidecar.core.actions import ACTIONS, DEGRADED_ACTIONS
from trainprobe.sidecar.core.episodes import INCONCLUSIVE_CHOICES
from trainprobe.sidecar.core.patience import REPLICA_FLOOR_S
from trainprobe.sidecar.core.ray_incident import RAY_FINDING_ACTIONS

ENV_PREFIX = "TRAINPROBE_"


@dataclass(frozen=True)
class Option:
    name: str
    parse: Callable[[Any], Any]
    doc: str
    section: str
    #: Shown in docs when the default is computed at run time.
    default_text: str = ""
    repeatable: bool = False
    secret: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


_S, _R, _A, _I, _L = "Serving", "Rules", "Actions", "Integrations", "Relay"
OPTIONS: tuple[Option, ...] = (
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
        "trainer container of another UID in the pod). Workers are verified all the same.",
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
        "HUNG if the first step has not completed this long after the worker connected.",
        _R,
    ),
    Option(
        "init_straggler_s",
        v.seconds(0.1, 604800),
        "HUNG (rule init_straggler) if a rank has not reached init_process_group this long "
        "after the last of its peers arrived there (needs the hook made before it).",
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
        "DEGRADED when a report window's slowest gradient sync exceeds this.",
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
    Option(
        "ray_address",
        v.optional_text,
        "Ray cluster to kill Ray actors through ('auto' finds the local one); none = signal pids.",
        _I,
        default_text="none",
    ),
    Option(
        "ray_timeout_s",
        v.seconds(0.1, 600),
        "Longest wait for Ray (connect, kill, actor state) before a kill falls back "
        "to signalling the pid.",
        _I,
    ),
    Option("ray_per_node", v.boolean, "Start one sidecar actor on every Ray node and exit.", _I),
    Option(
        "ray_watch",
        v.boolean,
        "With ray_address: watch the cluster for placement groups that can never start "
        "and wait cycles between tasks and actors (rules placement_group, wait_cycle).",
        _I,
    ),
    Option("ray_watch_interval_s", v.seconds(0.5, 600), "How often the Ray watcher looks.", _I),
    Option(
        "placement_pending_limit_s",
        v.seconds(1, 86400),
        "A placement group that fits the cluster but stays pending this long, while Ray "
        "keeps retrying, is a finding (Ray Train's own start timeout is 60 s).",
        _I,
    ),
    Option(
        "on_ray_finding",
        v.choice(*RAY_FINDING_ACTIONS),
        "What the Ray watcher's findings do. observe: an incident (log, span, metric, "
        "status), nothing is ended. kill: also ray.kill (no restart) the actors whose methods "
        "wait in a wait cycle, and, for a placement group that can never be placed, the "
        "job's Ray Train controller and the actors waiting to be placed in it, so the "
        "driver fails now instead of waiting forever. A group that fits but waits for "
        "resources others hold is never acted on; plain tasks are not ended (Ray cancels "
        "a task only through its ObjectRef); they fail once the actor they wait on is gone. "
        "restart: the same ray.kill, letting Ray restart actors that have max_restarts "
        "left (an infeasible group's controller then waits again). Counts against "
        "max_kills_per_hour; dry_run logs it only.",
        _I,
    ),
    Option(
        "telemetry",
        v.boolean,
        "Export OpenTelemetry traces and metrics (to otlp_endpoint, else to files in "
        "state_dir). OTEL_SDK_DISABLED=true also turns it off. See docs/OBSERVABILITY.md.",
        _I,
    ),
    Option(
        "job_sync_interval_ms",
        v.integer(50, 60_000),
        "Under Ray, how often each sidecar shares its ranks' summaries through the job's "
        "coordinator actor (every sidecar then analyses the whole job).",
        _I,
    ),
    Option(
        "py_spy",
        v.tool,
        "py-spy for stacks of a rank whose hook cannot answer (a C call holds the GIL, "
        "SIGSTOP): auto = on PATH or next to this Python; off; or a path.",
        _I,
    ),
    Option(
        "otlp_endpoint",
        v.otlp_endpoint,
        "OTLP/gRPC collector for spans and metrics (http://HOST:PORT is plaintext); none = "
        "OTEL_EXPORTER_OTLP_ENDPOINT if set, else OTLP-JSON lines in state_dir.",
        _I,
        default_text="none",
    ),
    Option(
        "trace_every_n_steps",
        v.integer(1, 1_000_000),
        "Sample one step span every N steps (steps that cross a rule are always traced).",
        _I,
    ),
    Option(
        "metrics_port",
        v.optional_port,
        "Prometheus scrape port; none = off.",
        _I,
        default_text="none",
    ),
    Option(
        "metrics_host",
        v.host,
        "Address the Prometheus endpoint binds to: loopback unless told otherwise (its "
        "per-rank labels name jobs and ranks, unauthenticated); 0.0.0.0 or the pod IP to "
        "let a cluster Prometheus scrape it (see docs/SECURITY.md).",
        _I,
    ),
    Option(
        "relay_to",
        v.optional_endpoint,
        "Relay mode: run no rules here; forward every worker stream on this node, in "
        "batches, to the upstream sidecar at this address (unix:///path or tcp://host:port; "
        "TCP sends the token, over TLS: relay_tls_cert_file), which runs the rules for all "
        "of them and sends back commands and kill orders that this sidecar carries out with "
        "its own signals.",
        _L,
        default_text="none",
    ),
    Option(
        "relay_interval_ms",
        v.integer(10, 10_000),
        "Relay mode: how often the buffered worker messages go upstream as one batch, in ms. "
        "Longer batches cost the upstream less per report: gRPC is paid per message, and "
        "each worker's reports within a batch go up folded into one. The wait adds at most "
        "this much to when the upstream sees a report, small next to seconds-long hang "
        "thresholds. The upstream is told it and allows for it: a relayed "
        "rank is silent after 3 batch intervals at least, and its stall counts from when the "
        "next batch was due. Commands and kills go down at once.",
        _L,
    ),
    Option(
        "relay_buffer_messages",
        v.integer(100, 10_000_000),
        "Relay mode: most worker messages held while the upstream is unreachable; beyond it "
        "the oldest reports are dropped (counted, logged once per outage).",
        _L,
    ),
    Option(
        "relay_tls_cert_file",
        v.optional_path,
        "Relay mode over tcp://: the upstream's certificate (its tls_cert_file), the only "
        "one this node trusts. The node sends its token, and takes kill orders, only after "
        "the TLS handshake proved the upstream holds that certificate's key. Required for a "
        "tcp:// relay_to unless --insecure.",
        _L,
        default_text="none",
    ),
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}
