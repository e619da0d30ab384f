"""The sidecar's one typed settings object and where its values come from.

Precedence, lowest first: built-in defaults < TOML file (``--config`` or
``TRAINPROBE_CONFIG``) < ``TRAINPROBE_<NAME>`` environment variables <
command-line flags. Every option is declared once in :data:`OPTIONS`, which
drives parsing, ``--help`` and docs/CONFIG.md alike.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainprobe.proto import EndpointError, default_socket_path, parse_endpoint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_PREFIX = "TRAINPROBE_"
ACTION_CHOICES = ("observe", "dump", "kill", "restart")


class SettingsError(ValueError):
    """A configuration value that is missing, unknown or out of range."""


# -- value parsers: each takes a raw value (str from env/CLI, typed from TOML) --


def _number(lo: float, hi: float, what: str = "a number") -> Callable[[Any], float]:
    def parse(v: Any) -> float:
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = float("nan")
        if isinstance(v, bool) or not lo <= x <= hi:
            raise ValueError(f"must be {what} in {lo:g}..{hi:g}")
        return x

    return parse


def _seconds(lo: float, hi: float) -> Callable[[Any], float]:
    return _number(lo, hi, "a number of seconds")


def _auto_or_seconds(lo: float, hi: float) -> Callable[[Any], float | None]:
    seconds = _seconds(lo, hi)

    def parse(v: Any) -> float | None:
        if isinstance(v, str) and v.strip().lower() == "auto":
            return None
        try:
            return seconds(v)
        except ValueError:
            raise ValueError(f"must be 'auto' or a number of seconds in {lo:g}..{hi:g}") from None

    return parse


def _integer(lo: int, hi: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        try:
            x = int(str(v).strip())
        except ValueError:
            raise ValueError(f"must be a whole number in {lo}..{hi}") from None
        if isinstance(v, bool) or not lo <= x <= hi:
            raise ValueError(f"must be a whole number in {lo}..{hi}")
        return x

    return parse


def _optional_port(v: Any) -> int | None:
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "off")):
        return None
    return _integer(0, 65535)(v)


def _ratio(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = float("nan")
    if not 0.0 < x <= 1.0:
        raise ValueError("must be a fraction in (0, 1]")
    return x


def _choice(*values: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        s = str(v).strip().lower()
        if s not in values:
            raise ValueError(f"must be one of {', '.join(values)}")
        return s

    return parse


def _boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _optional_text(v: Any) -> str | None:
    s = "" if v is None else str(v).strip()
    return s or None


def _tool(v: Any) -> str:
    """``auto``, ``off``, or the path of an executable."""
    s = "" if v is None else str(v).strip()
    if s.lower() in ("", "off", "none", "false", "0"):
        return "off"
    return "auto" if s.lower() == "auto" else s


def _path(v: Any) -> Path:
    s = str(v).strip()
    if not s:
        raise ValueError("must be a path")
    return Path(s).expanduser()


def _otlp_endpoint(v: Any) -> str | None:
    s = "" if v is None else str(v).strip()
    if s.lower() in ("", "none", "off"):
        return None
    scheme, sep, rest = s.partition("://")
    if not sep:
        scheme, rest = "", s
    host, colon, port = rest.rstrip("/").rpartition(":")
    if scheme not in ("", "http", "https") or not colon or not host or not port.isdigit():
        raise ValueError(
            "must be http://HOST:PORT (plaintext), https://HOST:PORT or HOST:PORT (TLS), or none"
        )
    return s


def _host(v: Any) -> str:
    s = "" if v is None else str(v).strip()
    try:
        return str(ipaddress.ip_address(s.strip("[]")))
    except ValueError:
        pass
    if not s or not all(c.isalnum() or c in ".-" for c in s):
        raise ValueError("must be a host name or IP address, e.g. 0.0.0.0 or 127.0.0.1")
    return s


def _optional_path(v: Any) -> Path | None:
    return None if v is None or str(v).strip() == "" else _path(v)


def _endpoints(v: Any) -> tuple[str, ...]:
    items = v if isinstance(v, (list, tuple)) else str(v).split(",")
    out = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        try:
            out.append(str(parse_endpoint(text)))
        except EndpointError as err:
            raise ValueError(str(err)) from None
    if not out:
        raise ValueError("needs at least one address")
    return tuple(out)


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


@dataclass(frozen=True)
class Settings:
    """Every sidecar setting, typed; build it with :func:`load_settings`."""

    # serving
    listen: tuple[str, ...] = ()
    token: str | None = None
    insecure: bool = False
    state_dir: Path = dataclasses.field(default_factory=lambda: _default_state_dir())
    incident_log: Path | None = None
    log_level: str = "info"
    tick_interval_ms: int = 100
    # rules
    heartbeat_timeout_s: float = 10.0
    stall_timeout_s: float | None = None
    stall_floor_s: float = 30.0
    stall_p99_factor: float = 10.0
    stall_warmup_steps: int = 20
    startup_timeout_s: float = 600.0
    phase_timeout_s: float = 3600.0
    gpu_memory_ratio: float = 0.95
    gpu_memory_reports: int = 3
    sync_latency_s: float = 5.0
    sync_timeout_s: float = 5.0
    # actions
    on_hung: str = "kill"
    on_unresponsive: str = "kill"
    on_degraded: str = "observe"
    dry_run: bool = False
    kill_grace_s: float = 5.0
    max_kills_per_hour: int = 10
    on_inconclusive: str = "kill_stalled"
    job_kill_grace_s: float = 10.0
    stack_timeout_s: float = 1.0
    # integrations
    ray_address: str | None = None
    ray_timeout_s: float = 10.0
    ray_per_node: bool = False
    telemetry: bool = True
    job_sync_interval_ms: int = 500
    py_spy: str = "auto"
    otlp_endpoint: str | None = None
    trace_every_n_steps: int = 100
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"

    @property
    def listen_addresses(self) -> tuple[str, ...]:
        return self.listen or (f"unix://{default_socket_path()}",)

    @property
    def incident_log_path(self) -> Path:
        return self.incident_log or self.state_dir / "incidents.jsonl"


_S, _R, _A, _I = "Serving", "Rules", "Actions", "Integrations"
OPTIONS: tuple[Option, ...] = (
    Option(
        "listen",
        _endpoints,
        "Address to serve: unix:///abs/path or tcp://host:port. "
        "Repeat the flag (or comma-separate in env) for several.",
        _S,
        default_text="unix://<tmp>/trainprobe-<uid>/sidecar.sock",
        repeatable=True,
    ),
    Option(
        "token",
        _optional_text,
        "Bearer token that TCP clients must send (hooks read TRAINPROBE_TOKEN too).",
        _S,
        default_text="none",
        secret=True,
    ),
    Option("insecure", _boolean, "Allow TCP listeners without a token.", _S),
    Option(
        "state_dir",
        _path,
        "Directory for the incident log and trace files.",
        _S,
        default_text="$XDG_STATE_HOME/trainprobe or ~/.local/state/trainprobe",
    ),
    Option(
        "incident_log",
        _optional_path,
        "Incident log, JSON Lines, append-only, fsync'd.",
        _S,
        default_text="<state_dir>/incidents.jsonl",
    ),
    Option("log_level", _choice("debug", "info", "warning", "error"), "Log verbosity.", _S),
    Option("tick_interval_ms", _integer(10, 100), "How often the rules run, in ms.", _S),
    Option(
        "heartbeat_timeout_s",
        _seconds(0.1, 86400),
        "UNRESPONSIVE after this long without a report (never less than 3 report intervals).",
        _R,
    ),
    Option(
        "stall_timeout_s",
        _auto_or_seconds(0.1, 86400),
        "HUNG when the step has not "
        "advanced this long outside a phase. 'auto' = max(stall_floor_s, "
        "stall_p99_factor x p99 step time) after stall_warmup_steps steps.",
        _R,
        default_text="auto",
    ),
    Option("stall_floor_s", _seconds(0.1, 86400), "Lower bound of the auto stall threshold.", _R),
    Option(
        "stall_p99_factor",
        _number(1, 1000),
        "Multiple of the p99 step time in the auto stall threshold.",
        _R,
    ),
    Option(
        "stall_warmup_steps",
        _integer(1, 1_000_000),
        "Step times observed before "
        "'auto' applies; until then startup_timeout_s is the stall limit.",
        _R,
    ),
    Option(
        "startup_timeout_s",
        _seconds(0.1, 604800),
        "HUNG if the first step has not completed this long after the worker connected.",
        _R,
    ),
    Option(
        "phase_timeout_s",
        _seconds(0.1, 604800),
        "Limit for a phase declared without timeout_s.",
        _R,
    ),
    Option(
        "gpu_memory_ratio",
        _ratio,
        "DEGRADED when device memory used/total reaches "
        "this for gpu_memory_reports reports in a row.",
        _R,
    ),
    Option(
        "gpu_memory_reports",
        _integer(1, 1000),
        "Consecutive NVML samples (hooks take one a second at most) at or over "
        "gpu_memory_ratio that make a gpu_memory finding.",
        _R,
    ),
    Option(
        "sync_latency_s",
        _seconds(0.001, 86400),
        "DEGRADED when a report window's slowest gradient sync exceeds this.",
        _R,
    ),
    Option(
        "sync_timeout_s",
        _seconds(0.1, 86400),
        "HUNG when a collective has been in flight this long outside a phase.",
        _R,
    ),
    Option(
        "on_hung",
        _choice(*ACTION_CHOICES),
        "Action for HUNG verdicts. restart = kill so that the orchestrator starts the "
        "worker again (Ray Train: the worker group, from the latest checkpoint).",
        _A,
    ),
    Option("on_unresponsive", _choice(*ACTION_CHOICES), "Action for UNRESPONSIVE verdicts.", _A),
    Option("on_degraded", _choice("observe", "dump"), "Action for DEGRADED verdicts.", _A),
    Option("dry_run", _boolean, "Log every action instead of doing it.", _A),
    Option("kill_grace_s", _seconds(0, 600), "Seconds between SIGTERM and SIGKILL.", _A),
    Option(
        "max_kills_per_hour",
        _integer(0, 100_000),
        "Most kill/restart actions per job in any hour; beyond it incidents are only observed.",
        _A,
    ),
    Option(
        "on_inconclusive",
        _choice("kill_stalled", "observe"),
        "When a hang's culprit analysis names no rank (every rank waits in one collective, "
        "no collective data): kill_stalled = the on_hung/on_unresponsive action hits every "
        "stalled rank; observe = only the incident.",
        _A,
    ),
    Option(
        "job_kill_grace_s",
        _seconds(0, 3600),
        "After a hang's culprits are killed, the job's other ranks that are still alive and "
        "have not stepped since are killed this many seconds later (Ray Train usually ends "
        "them first).",
        _A,
    ),
    Option(
        "stack_timeout_s",
        _seconds(0.05, 60),
        "How long a culprit's hook has to send its Python stacks before the sidecar reads "
        "them from outside (py-spy, then the hook's faulthandler signal).",
        _A,
    ),
    Option(
        "ray_address",
        _optional_text,
        "Ray cluster to kill Ray actors through ('auto' finds the local one); none = signal pids.",
        _I,
        default_text="none",
    ),
    Option(
        "ray_timeout_s",
        _seconds(0.1, 600),
        "Longest wait for Ray (connect, kill, actor state) before a kill falls back "
        "to signalling the pid.",
        _I,
    ),
    Option("ray_per_node", _boolean, "Start one sidecar actor on every Ray node and exit.", _I),
    Option(
        "telemetry",
        _boolean,
        "Export OpenTelemetry traces and metrics (to otlp_endpoint, else to files in "
        "state_dir). OTEL_SDK_DISABLED=true also turns it off. See docs/OBSERVABILITY.md.",
        _I,
    ),
    Option(
        "job_sync_interval_ms",
        _integer(50, 60_000),
        "Under Ray, how often each sidecar shares its ranks' summaries through the job's "
        "coordinator actor (every sidecar then analyses the whole job).",
        _I,
    ),
    Option(
        "py_spy",
        _tool,
        "py-spy for stacks of a rank whose hook cannot answer (a C call holds the GIL, "
        "SIGSTOP): auto = on PATH or next to this Python; off; or a path.",
        _I,
    ),
    Option(
        "otlp_endpoint",
        _otlp_endpoint,
        "OTLP/gRPC collector for spans and metrics (http://HOST:PORT is plaintext); none = "
        "OTEL_EXPORTER_OTLP_ENDPOINT if set, else OTLP-JSON lines in state_dir.",
        _I,
        default_text="none",
    ),
    Option(
        "trace_every_n_steps",
        _integer(1, 1_000_000),
        "Sample one step span every N steps (steps that cross a rule are always traced).",
        _I,
    ),
    Option(
        "metrics_port",
        _optional_port,
        "Prometheus scrape port; none = off.",
        _I,
        default_text="none",
    ),
    Option(
        "metrics_host",
        _host,
        "Address the Prometheus endpoint binds to.",
        _I,
    ),
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "trainprobe"


def defaults() -> dict[str, Any]:
    """Every setting's default value."""
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        for f in dataclasses.fields(Settings)
    }


def _apply(values: dict[str, Any], source: str, raw: Mapping[str, Any], env: bool) -> None:
    for key, value in raw.items():
        opt = OPTIONS_BY_NAME.get(key)
        where = f"{source}: {ENV_PREFIX + key.upper() if env else key}"
        if opt is None:
            close = [o.name for o in OPTIONS if o.name.split("_")[0] == key.split("_")[0]]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise SettingsError(f"{where}: unknown setting{hint}")
        try:
            values[key] = opt.parse(value)
        except ValueError as err:
            raise SettingsError(f"{where}={value!r}: {err}") from None


def load_settings(
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    cli: Mapping[str, Any] | None = None,
) -> Settings:
    """Build :class:`Settings` from a TOML file, the environment and CLI values.

    ``cli`` maps option names to raw values; None values are ignored.
    Raises :class:`SettingsError` naming the key and its accepted range.
    """
    env = os.environ if env is None else env
    values = defaults()
    path = config or env.get(ENV_PREFIX + "CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise SettingsError(f"config file {path} does not exist") from None
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise SettingsError(f"config file {path}: {err}") from None
        data = data.get("sidecar", data) if isinstance(data.get("sidecar"), dict) else data
        _apply(values, str(path), data, env=False)
    from_env = {
        k[len(ENV_PREFIX) :].lower(): v
        for k, v in env.items()
        if k.startswith(ENV_PREFIX) and k[len(ENV_PREFIX) :].lower() in OPTIONS_BY_NAME
    }
    _apply(values, "environment", from_env, env=True)
    if cli:
        _apply(values, "command line", {k: v for k, v in cli.items() if v is not None}, False)
    if (
        any(a.startswith("tcp://") for a in values["listen"])
        and not values["token"]
        and not values["insecure"]
    ):
        raise SettingsError(
            "listen: a tcp:// address needs --token (or TRAINPROBE_TOKEN); "
            "pass --insecure to serve TCP without authentication"
        )
    return Settings(**values)


def render_markdown() -> str:
    """The configuration reference, as committed in docs/CONFIG.md."""
    lines = [
        "# Sidecar configuration",
        "",
        "Generated from `trainprobe.sidecar.settings.OPTIONS`; "
        "`tests/test_settings.py` fails if this file is stale.",
        "",
        "Precedence, lowest first: defaults < TOML file (`--config FILE` or "
        "`TRAINPROBE_CONFIG`) < `TRAINPROBE_<NAME>` environment variables < command-line "
        "flags. In TOML, write `name = value` at the top level or under `[sidecar]`. "
        "Every time value carries its unit in its name.",
    ]
    dflt = defaults()
    section = ""
    for o in OPTIONS:
        if o.section != section:
            section = o.section
            lines += [
                "",
                f"## {section}",
                "",
                "| setting | flag / env | default | meaning |",
                "| --- | --- | --- | --- |",
            ]
        d = o.default_text or _show(dflt[o.name])
        lines.append(f"| `{o.name}` | `{o.flag}` / `{o.env}` | `{d}` | {o.doc} |")
    return "\n".join(lines) + "\n"


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return "none" if v is None else str(v)
