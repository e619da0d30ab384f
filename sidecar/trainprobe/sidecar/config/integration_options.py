"""The sidecar's options for what it works with: Ray, OpenTelemetry, Prometheus,
and relay mode (node sidecars forwarding to an upstream). Part of the one table,
:data:`trainprobe.sidecar.config.options.OPTIONS`, in its order.
"""

from __future__ import annotations

from trainprobe.sidecar.config import parsers as v
from trainprobe.sidecar.config.option import INTEGRATIONS as _I
from trainprobe.sidecar.config.option import RELAY as _L
from trainprobe.sidecar.config.option import Option
from trainprobe.sidecar.core.ray.incident import RAY_FINDING_ACTIONS

__all__ = ["INTEGRATION_OPTIONS"]

INTEGRATION_OPTIONS: tuple[Option, ...] = (
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
        "Under Ray or with job_sync_to, how often each sidecar shares its ranks' summaries "
        "through the job's coordinator (an actor, or the job_sync_to upstream).",
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
        "job_sync_to",
        v.optional_endpoint,
        "Summary mode, for jobs that span nodes outside Ray: this sidecar judges its own "
        "ranks as usual and keeps one stream to the upstream sidecar at this address "
        "(unix:///path or tcp://host:port; TCP sends the token, over TLS: "
        "relay_tls_cert_file), which holds every node's rank summaries of each job. It "
        "sends only the summaries that changed, every job_sync_interval_ms at most, and a "
        "heartbeat otherwise; while a rank of a job is suspect it fetches the other nodes' "
        "ranks and names the job's culprit from them. Kills stay with the node whose rank "
        "it is. Any sidecar serves as the upstream; not with relay_to or ray_address.",
        _L,
        default_text="none",
    ),
    Option(
        "relay_tls_cert_file",
        v.optional_path,
        "Relay mode and job_sync_to over tcp://: the upstream's certificate (its "
        "tls_cert_file), the only one this node trusts. The node sends its token, and takes "
        "kill orders or summaries, only after the TLS handshake proved the upstream holds "
        "that certificate's key. Required for a tcp:// relay_to or job_sync_to unless "
        "--insecure.",
        _L,
        default_text="none",
    ),
)
