"""Settings: TOML < env < flags, clear errors, and docs that match the code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support import REPO
from trainprobe.proto import EndpointError, parse_endpoint
from trainprobe.sidecar.cli.sidecar import parse_settings
from trainprobe.sidecar.config.settings import (
    OPTIONS,
    Settings,
    SettingsError,
    load_settings,
    render_markdown,
)


def test_every_setting_is_declared_once_with_docs() -> None:
    fields = [f.name for f in dataclasses.fields(Settings)]
    assert [o.name for o in OPTIONS] == fields
    for o in OPTIONS:
        assert o.doc.endswith("."), o.name
    times = [f for f in fields if "timeout" in f or "grace" in f or "interval" in f]
    assert all(f.endswith(("_s", "_ms")) for f in times)


def test_docs_config_is_generated_from_the_code() -> None:
    text = (REPO / "docs" / "CONFIG.md").read_text()
    assert text == render_markdown(), "docs/CONFIG.md is stale: run `make docs`"


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "trainprobe.toml"
    cfg.write_text('stall_timeout_s = 40\nheartbeat_timeout_s = 7\non_hung = "dump"\n')
    env = {"TRAINPROBE_HEARTBEAT_TIMEOUT_S": "8", "TRAINPROBE_STALL_TIMEOUT_S": "50"}
    s = load_settings(config=cfg, env=env, cli={"stall_timeout_s": "60"})
    assert (s.stall_timeout_s, s.heartbeat_timeout_s, s.on_hung) == (60.0, 8.0, "dump")
    assert load_settings(env={}).stall_timeout_s is None  # auto by default


def test_sidecar_table_in_toml_and_config_from_env(tmp_path: Path) -> None:
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        '[sidecar]\nlisten = ["unix:///tmp/a.sock", "tcp://127.0.0.1:0"]\ntoken = "s3"\n'
    )
    s = load_settings(env={"TRAINPROBE_CONFIG": str(cfg)})
    assert s.listen == ("unix:///tmp/a.sock", "tcp://127.0.0.1:0") and s.token == "s3"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"stall_timeout_s": "soon"},
            "stall_timeout_s='soon': must be 'auto' or a number of seconds",
        ),
        (
            {"heartbeat_timeout_s": "-1"},
            "heartbeat_timeout_s='-1': must be a number of seconds in 0.1..86400",
        ),
        ({"on_hung": "explode"}, "on_hung='explode': must be one of observe, dump, kill, restart"),
        ({"gpu_memory_ratio": "1.5"}, "gpu_memory_ratio='1.5': must be a fraction in (0, 1]"),
        ({"tick_interval_ms": "500"}, "tick_interval_ms='500': must be a whole number in 10..100"),
        ({"listen": "ftp://x"}, "listen"),
    ],
)
def test_bad_values_name_the_key_and_range(raw: dict, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(env={}, cli=raw)
    assert message in str(err.value)


def test_unknown_toml_key_is_an_error(tmp_path: Path) -> None:
    cfg = tmp_path / "t.toml"
    cfg.write_text("stall_timeout = 3\n")
    with pytest.raises(SettingsError, match=r"stall_timeout: unknown setting.*stall_timeout_s"):
        load_settings(config=cfg, env={})
    # A typo in the first word too: the nearest name, as a mistyped flag gets.
    cfg.write_text("hnag_patience_s = 3\n")
    with pytest.raises(SettingsError) as err:
        load_settings(config=cfg, env={})
    assert str(err.value).endswith(
        "hnag_patience_s: unknown setting (did you mean hang_patience_s?)"
    )


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="TRAINPROBE_KILL_GRACE_S='x'"):
        load_settings(env={"TRAINPROBE_KILL_GRACE_S": "x"})


def test_tcp_needs_a_token_unless_insecure() -> None:
    with pytest.raises(SettingsError, match="--insecure"):
        load_settings(env={}, cli={"listen": ["tcp://127.0.0.1:0"]})
    assert load_settings(env={}, cli={"listen": ["tcp://127.0.0.1:0"], "insecure": True}).insecure


def test_cli_flags_parse_into_settings(tmp_path: Path) -> None:
    s = parse_settings(
        [
            "--listen",
            "unix:///tmp/x.sock",
            "--listen",
            "tcp://127.0.0.1:9",
            "--token",
            "t",
            "--dry-run",
            "--stall-timeout-s",
            "auto",
            "--state-dir",
            str(tmp_path),
        ]
    )
    assert s.listen == ("unix:///tmp/x.sock", "tcp://127.0.0.1:9")
    assert s.dry_run and s.stall_timeout_s is None
    assert s.incident_log_path == tmp_path / "incidents.jsonl"
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(["--kill-grace-s", "forever"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("unix:///run/tp.sock", "unix:///run/tp.sock"),
        ("/run/tp.sock", "unix:///run/tp.sock"),
        ("tcp://10.0.0.1:7000", "10.0.0.1:7000"),
        ("localhost:7000", "localhost:7000"),
        ("tcp://[::1]:7000", "[::1]:7000"),
    ],
)
def test_endpoints(text: str, target: str) -> None:
    assert parse_endpoint(text).grpc_target == target


@pytest.mark.parametrize(
    "text", ["", "unix://relative.sock", "host", "host:port", "h:70000", "unix:///" + "x" * 120]
)
def test_bad_endpoints(text: str) -> None:
    with pytest.raises(EndpointError):
        parse_endpoint(text)


def test_token_file_is_read_and_must_be_private(tmp_path: Path) -> None:
    """--token-file / TRAINPROBE_TOKEN_FILE: the token stays out of ps and of the environment."""
    import os

    from trainprobe.sidecar.config.settings import SettingsError, load_settings

    f = tmp_path / "token"
    f.write_text("  abc123  \nignored\n")
    os.chmod(f, 0o600)
    assert load_settings(env={"TRAINPROBE_TOKEN_FILE": str(f)}).token == "abc123"
    assert load_settings(env={}, cli={"token_file": str(f)}).token == "abc123"
    with pytest.raises(SettingsError, match="both set"):
        load_settings(env={}, cli={"token_file": str(f), "token": "x"})
    for mode in (0o640, 0o604, 0o660):
        os.chmod(f, mode)
        with pytest.raises(SettingsError, match="chmod 600"):
            load_settings(env={}, cli={"token_file": str(f)})
    os.chmod(f, 0o600)
    f.write_text("\n")
    with pytest.raises(SettingsError, match="empty"):
        load_settings(env={}, cli={"token_file": str(f)})
    with pytest.raises(SettingsError, match="No such file"):
        load_settings(env={}, cli={"token_file": str(tmp_path / "absent")})


def test_a_tcp_relay_needs_the_upstreams_certificate(tmp_path: Path) -> None:
    """The node authenticates its upstream before it sends the token: TLS, pinned."""
    import os

    from trainprobe.sidecar.config.settings import SettingsError, load_settings

    cert, key = tmp_path / "up.crt", tmp_path / "up.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    os.chmod(key, 0o600)
    relay = {"relay_to": "tcp://up:7070", "token": "t"}
    with pytest.raises(SettingsError, match="needs relay_tls_cert_file"):
        load_settings(env={}, cli=relay)
    assert load_settings(env={}, cli={**relay, "insecure": True}).relay_tls_cert_file is None
    pinned = load_settings(env={}, cli={**relay, "relay_tls_cert_file": str(cert)})
    assert pinned.relay_tls_cert_file == cert
    with pytest.raises(SettingsError, match="is for a tcp:// relay_to"):
        load_settings(env={}, cli={"relay_to": "unix:///x.sock", "relay_tls_cert_file": str(cert)})
    with pytest.raises(SettingsError, match="No such file"):
        load_settings(env={}, cli={**relay, "relay_tls_cert_file": str(tmp_path / "absent")})
    served = {"tls_cert_file": str(cert), "tls_key_file": str(key)}
    assert load_settings(env={}, cli=served).tls_key_file == key
    with pytest.raises(SettingsError, match="go together"):
        load_settings(env={}, cli={"tls_cert_file": str(cert)})
    os.chmod(key, 0o640)
    with pytest.raises(SettingsError, match="chmod 600"):
        load_settings(env={}, cli=served)
    (tmp_path / "plain").write_text("not pem\n")
    with pytest.raises(SettingsError, match="not a PEM file"):
        load_settings(env={}, cli={**relay, "relay_tls_cert_file": str(tmp_path / "plain")})
