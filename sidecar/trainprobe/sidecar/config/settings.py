"""The sidecar's one typed settings object and where its values come from.

Precedence, lowest first: built-in defaults < TOML file (``--config`` or
``TRAINPROBE_CONFIG``) < ``TRAINPROBE_<NAME>`` environment variables <
command-line flags. Every option is declared once in
:data:`~trainprobe.sidecar.config.options.OPTIONS`, which drives parsing, ``--help``
and docs/CONFIG.md alike.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainprobe.proto import default_socket_path
from trainprobe.sidecar.config.options import (
    ENV_PREFIX,
    OPTIONS,
    OPTIONS_BY_NAME,
    Option,
)
from trainprobe.sidecar.config.tls import tls_problem
from trainprobe.sidecar.core.hang.episodes import INCONCLUSIVE_CHOICES
from trainprobe.sidecar.core.incident.actions import Action
from trainprobe.sidecar.core.judge.rules import RuleConfig
from trainprobe.sidecar.core.session.thresholds import StallPolicy
from trainprobe.sidecar.core.text import did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ENV_PREFIX",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "Option",
    "Settings",
    "SettingsError",
    "defaults",
    "load_settings",
    "render_markdown",
]


class SettingsError(ValueError):
    """A configuration value that is missing, unknown or out of range."""


_RULES = RuleConfig()
_STALL = StallPolicy()


@dataclass(frozen=True)
class Settings:
    """Every sidecar setting, typed; build it with :func:`load_settings`."""

    # serving
    listen: tuple[str, ...] = ()
    token: str | None = None
    token_file: Path | None = None
    insecure: bool = False
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    socket_access: str = "user"
    state_dir: Path = dataclasses.field(default_factory=lambda: _default_state_dir())
    incident_log: Path | None = None
    incident_log_max_bytes: int = 64 * 1024 * 1024
    incident_log_keep: int = 4
    log_level: str = "info"
    tick_interval_ms: int = 100
    settle_s: float = 1.0
    engine_stall_s: float = 5.0
    # rules: the defaults are the core's (one source: core/judge/rules.py,
    # core/session/thresholds.py)
    heartbeat_timeout_s: float = _RULES.heartbeat_timeout_s
    stall_timeout_s: float | None = _STALL.timeout_s
    stall_floor_s: float = _STALL.floor_s
    stall_p99_factor: float = _STALL.p99_factor
    stall_warmup_steps: int = _STALL.warmup_steps
    startup_timeout_s: float = _STALL.startup_timeout_s
    init_straggler_s: float = _RULES.init_straggler_s
    rendezvous_timeout_s: float = _RULES.rendezvous_timeout_s
    phase_timeout_s: float = _RULES.phase_timeout_s
    gpu_memory_ratio: float = _RULES.gpu_memory_ratio
    gpu_memory_reports: int = _RULES.gpu_memory_reports
    sync_latency_s: float = _RULES.sync_latency_s
    sync_timeout_s: float = _RULES.sync_timeout_s
    # actions
    on_hung: str = Action.KILL.value
    on_unresponsive: str = Action.KILL.value
    on_degraded: str = Action.OBSERVE.value
    dry_run: bool = False
    kill_grace_s: float = 5.0
    max_kills_per_hour: int = 10
    on_inconclusive: str = INCONCLUSIVE_CHOICES[0]
    hang_patience_s: float | None = None
    replica_patience_s: float | None = None
    job_kill_grace_s: float = 10.0
    stack_timeout_s: float = 1.0
    # integrations
    ray_address: str | None = None
    ray_timeout_s: float = 10.0
    ray_per_node: bool = False
    ray_watch: bool = True
    ray_watch_interval_s: float = 2.0
    placement_pending_limit_s: float = 60.0
    on_ray_finding: str = "observe"
    telemetry: bool = True
    job_sync_interval_ms: int = 500
    py_spy: str = "auto"
    otlp_endpoint: str | None = None
    trace_every_n_steps: int = 100
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # relay
    relay_to: str | None = None
    #: 500 ms: five hook reports of a worker fold into one (relay/coalesce.py), so one
    #: upstream core carries about 1.5x the ranks it would at 200 ms (bench/HISTORY.md).
    relay_interval_ms: int = 500
    relay_buffer_messages: int = 20_000
    job_sync_to: str | None = None
    relay_tls_cert_file: Path | None = None

    @property
    def listen_addresses(self) -> tuple[str, ...]:
        return self.listen or (f"unix://{default_socket_path()}",)

    @property
    def incident_log_path(self) -> Path:
        return self.incident_log or self.state_dir / "incidents.jsonl"


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "trainprobe"


def defaults() -> dict[str, Any]:
    """Every setting's default value."""
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
        for f in dataclasses.fields(Settings)
    }


def _apply(values: dict[str, Any], source: str, raw: Mapping[str, Any], env: bool) -> None:
    for key, value in raw.items():
        opt = OPTIONS_BY_NAME.get(key)
        where = f"{source}: {ENV_PREFIX + key.upper() if env else key}"
        if opt is None:
            hint = did_you_mean(key, (o.name for o in OPTIONS))
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
    if values["token_file"] is not None:
        if values["token"]:
            raise SettingsError("token and token_file are both set; give one")
        values["token"] = read_token_file(values["token_file"])
    if (
        any(a.startswith("tcp://") for a in values["listen"])
        and not values["token"]
        and not values["insecure"]
    ):
        raise SettingsError(
            "listen: a tcp:// address needs --token or --token-file (or TRAINPROBE_TOKEN); "
            "pass --insecure to serve TCP without authentication"
        )
    relay_to = values["relay_to"] or ""
    if relay_to.startswith("tcp://") and not values["token"] and not values["insecure"]:
        raise SettingsError(
            "relay_to: a tcp:// upstream needs --token or --token-file (or TRAINPROBE_TOKEN), "
            "which it is sent; "
            "pass --insecure to relay over TCP without authentication"
        )
    job_sync_to = values["job_sync_to"] or ""
    if job_sync_to and (relay_to or values["ray_address"]):
        raise SettingsError(
            "job_sync_to: give one of job_sync_to, relay_to and ray_address (a relay node "
            "judges nothing to sync; under Ray each job's coordinator is an actor)"
        )
    if job_sync_to.startswith("tcp://") and not values["token"] and not values["insecure"]:
        raise SettingsError(
            "job_sync_to: a tcp:// upstream needs --token or --token-file (or "
            "TRAINPROBE_TOKEN), which it is sent; pass --insecure to sync over TCP "
            "without authentication"
        )
    problem = tls_problem(values)
    if problem is not None:
        raise SettingsError(problem)
    return Settings(**values)


def read_token_file(path: Path) -> str:
    """The token in ``path``'s first line; SettingsError if unsafe or empty.

    A file group or others can read is refused, not warned about: the token
    is the only credential TCP clients have, a warning scrolls by unread,
    and the fix (chmod 600) takes a second.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise SettingsError(f"token_file {path}: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SettingsError(f"token_file {path}: not a regular file")
        if st.st_mode & 0o077:
            raise SettingsError(
                f"token_file {path}: mode {stat.S_IMODE(st.st_mode):04o} lets group or others "
                f"read or write it; chmod 600 {path}"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token:
        raise SettingsError(f"token_file {path}: empty")
    return token


def render_markdown() -> str:
    """The configuration reference, as committed in docs/CONFIG.md."""
    lines = [
        "# Sidecar configuration",
        "",
        "Generated from `trainprobe.sidecar.config.options.OPTIONS`; "
        "`tests/unit/test_settings.py` fails if this file is stale.",
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
