"""Unit tests of the pure telemetry pieces: config, resource, metric values, health."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from tests.otel_builders import coll, hello, report
from trainprobe.sidecar.config.settings import SettingsError, load_settings
from trainprobe.sidecar.core.session.model import GpuMemoryData, Verdict
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.otel import ExportHealth, gauge_snapshot, resource_attributes
from trainprobe.sidecar.otel.export.config import SPAN_DELAY_MS, telemetry_config
from trainprobe.sidecar.otel.metrics.measures import (
    GPU_MEMORY_LIMIT,
    GPU_MEMORY_USAGE,
    HEARTBEAT_AGE,
    LAST_STEP,
    WORKERS,
    action_outcome,
    step_observations,
    sync_observations,
)


def settings(**cli: str):
    return load_settings(env={}, cli={"state_dir": "/tmp/tp-state", **cli})


def test_default_is_otlp_json_files_in_the_state_dir() -> None:
    cfg = telemetry_config(settings(), env={})
    assert cfg.traces and cfg.otlp_metrics and not cfg.otlp and not cfg.explicit
    assert cfg.traces_file == Path("/tmp/tp-state/traces.otlp.jsonl")
    assert cfg.span_delay_ms == SPAN_DELAY_MS
    assert cfg.prometheus_port is None


def test_endpoint_precedence_and_standard_variables() -> None:
    cfg = telemetry_config(settings(otlp_endpoint="http://c:4317"), env={})
    assert cfg.otlp and cfg.endpoint == "http://c:4317" and cfg.explicit
    env_only = telemetry_config(settings(), env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:4317"})
    assert env_only.otlp and env_only.endpoint is None  # the SDK reads the variable itself
    tuned = telemetry_config(settings(), env={"OTEL_BSP_SCHEDULE_DELAY": "50"})
    assert tuned.span_delay_ms is None  # the SDK honours the variable
    assert not telemetry_config(settings(), env={"OTEL_SDK_DISABLED": "true"}).enabled
    assert not telemetry_config(settings(telemetry="false"), env={}).enabled
    only_metrics = telemetry_config(settings(), env={"OTEL_TRACES_EXPORTER": "none"})
    assert not only_metrics.traces and only_metrics.otlp_metrics
    prom = telemetry_config(settings(telemetry="off", metrics_port="9464"), env={})
    assert prom.enabled and not prom.traces and prom.prometheus_port == 9464


def test_bad_endpoint_is_refused_naming_the_key() -> None:
    with pytest.raises(SettingsError, match="otlp_endpoint='tcp://c:1': must be http://HOST:PORT"):
        settings(otlp_endpoint="tcp://c:1")
    with pytest.raises(SettingsError, match="metrics_host"):
        settings(metrics_host="a b")


def test_resource_attributes_outside_and_inside_kubernetes() -> None:
    plain = resource_attributes({"POD_NAME": "x"}, "node1", "0.1.0", read_text=lambda p: "")
    assert plain == {
        "service.name": "trainprobe-sidecar",
        "service.version": "0.1.0",
        "host.name": "node1",
    }
    k8s = resource_attributes(
        {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "pod-1", "K8S_NODE_NAME": "n7"},
        "pod-1",
        "0.1.0",
        read_text=lambda p: "ml-team" if p.endswith("namespace") else "",
    )
    assert k8s["k8s.pod.name"] == "pod-1"
    assert k8s["k8s.namespace.name"] == "ml-team"
    assert k8s["k8s.node.name"] == "n7"


def test_metric_values_from_reports() -> None:
    r = report(1, [1, 2], samples=(coll(2, 1, 1, 2.5),))
    assert step_observations(r) == [0.01, 0.01]
    ((secs, group, op),) = sync_observations(r)
    assert (round(secs, 6), group, op) == (0.0025, "dp", "allreduce")
    assert action_outcome({"ok": True}) == "ok"
    assert action_outcome({"ok": False}) == "failed"
    assert action_outcome({"ok": True, "dry_run": True}) == "dry_run"


def test_gauge_snapshot_covers_connected_workers_and_counts_verdicts() -> None:
    reg = Registry()
    a = reg.open(hello(rank=0, gpu_uuid="GPU-a"), 10.0)
    gpu = GpuMemoryData(
        reserved_bytes=5, has_nvml=True, device_used_bytes=70, device_total_bytes=100
    )
    reg.apply(a, replace(report(1, [1, 2]), gpu=gpu), 10.0)
    b = reg.open(hello(rank=1, pid=7), 10.0)
    reg.apply(b, report(1, [1]), 11.0)
    b.verdict = Verdict.HUNG
    reg.close(b, b.generation, "vanished", 12.0, False)
    snap = gauge_snapshot(reg, now=13.5)
    (age,) = snap.get(HEARTBEAT_AGE)  # only the connected worker
    assert age == (3.5, {"trainprobe.job_id": "jobA", "trainprobe.rank": 0})
    assert snap.get(LAST_STEP)[0][0] == 2
    ((used, gattrs),) = snap.get(GPU_MEMORY_USAGE)
    assert used == 70 and gattrs["hw.id"] == "GPU-a"
    assert snap.get(GPU_MEMORY_LIMIT)[0][0] == 100
    counts = {
        (p[1]["trainprobe.verdict"], p[1]["trainprobe.state"]): p[0] for p in snap.get(WORKERS)
    }
    assert counts == {("OK", "connected"): 1, ("HUNG", "vanished"): 1}


def test_export_health_says_it_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    health = ExportHealth("http://c:4317", "queue note")
    with caplog.at_level(logging.INFO, logger="trainprobe.sidecar"):
        health.note("UNAVAILABLE: connection refused")
        for _ in range(5):
            health.failed("spans", 10)
        health.succeeded("spans", 3)
        health.succeeded("spans", 3)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "is failing (UNAVAILABLE: connection refused)" in lines[0]
    assert "works again" in lines[1] and "50 spans" in lines[1]
    assert health.outages == 1 and health.exported["spans"] == 6
