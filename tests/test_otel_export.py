"""Telemetry against real receivers: a real sidecar process, a real hook in this
process, an OTLP/gRPC receiver served here, and real Prometheus scrapes.

The hook's collector stands in for issue 3's gradient-sync timing: it fills
``sync.samples`` with collectives this test really timed (sleeps between two
``time.monotonic_ns()`` reads), so the assertions can compare span durations
with the exact values the worker measured.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.otel_support import OtlpReceiver, Span, flatten_spans
from tests.support import PYTHON, child_env, free_port, short_tmpdir, sidecar, wait_for
from trainprobe.hooks import LivenessProbeHook
from trainprobe.proto import probe_pb2
from trainprobe.sidecar.otel import step_trace_id, trace_id_hex

GIB = 1 << 30
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "300"}


class TimedTraining:
    """A training loop whose collectives are really timed, reported by a real hook."""

    def __init__(self, target: str, job_id: str) -> None:
        self.lock = threading.Lock()
        self.pending: list[probe_pb2.CollectiveSample] = []
        self.collectives: dict[int, tuple[int, int, int]] = {}  # seq -> (step, start, end)
        self.step_ends: dict[int, int] = {}
        self.hook = LivenessProbeHook(
            target=target, interval_ms=50, job_id=job_id, rank=0, world_size=1
        )
        self.hook.add_collector(self._collect)

    def _collect(self, report: probe_pb2.Report) -> None:
        with self.lock:
            samples, self.pending = self.pending, []
        report.sync.count = len(samples)
        report.sync.samples.extend(samples)
        report.gpu_memory.has_nvml = True
        report.gpu_memory.device_used_bytes = 3 * GIB
        report.gpu_memory.device_total_bytes = 80 * GIB

    def run(self, steps: int, checkpoint_after: int = 0) -> None:
        seq = 0
        for step in range(1, steps + 1):
            for bucket in range(2):
                seq += 1
                start = time.monotonic_ns()
                time.sleep(0.004 + 0.002 * bucket)  # the "allreduce"
                end = time.monotonic_ns()
                self.collectives[seq] = (step, start, end)
                sample = probe_pb2.CollectiveSample(
                    group="dp",
                    seq=seq,
                    op="allreduce",
                    bytes=4096,
                    start_mono_ns=start,
                    end_mono_ns=end,
                    step=step,
                )
                with self.lock:
                    self.pending.append(sample)
            time.sleep(0.005)
            self.hook.on_step_end(step)
            self.step_ends[step] = time.monotonic_ns()
            if step == checkpoint_after:
                with self.hook.phase("checkpoint", timeout_s=30):
                    time.sleep(0.15)


def scrape(port: int) -> dict[str, Any]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {f.name: f for f in text_string_to_metric_families(body)}


def samples_of(families: dict[str, Any], name: str, **labels: str) -> list[Any]:
    fam = families.get(name)
    if fam is None:
        return []
    return [s for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items())]


def test_reports_become_step_collective_and_phase_spans_and_metrics() -> None:
    port = free_port()
    env = {**FAST_EXPORT, "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test"}
    with (
        OtlpReceiver() as rcv,
        sidecar(
            "--otlp-endpoint",
            rcv.endpoint,
            "--trace-every-n-steps",
            "5",
            "--metrics-port",
            str(port),
            "--metrics-host",
            "127.0.0.1",
            env=env,
        ) as sc,
    ):
        train = TimedTraining(sc.target, job_id="otel-export")
        try:
            train.run(20, checkpoint_after=10)
            time.sleep(0.2)
            families = wait_for(
                lambda: (f := scrape(port)) and samples_of(f, "hw_gpu_memory_usage_bytes") and f,
                10,
                what="gpu memory on the scrape",
            )
        finally:
            train.hook.close()

        def step_spans() -> list[Span]:
            return [s for s in rcv.spans() if s.name == "step"]

        wait_for(lambda: len(step_spans()) >= 4, 15, what="4 sampled step spans")
        wait_for(
            lambda: len([s for s in rcv.spans() if s.name == "allreduce"]) >= 8,
            15,
            what="collective spans",
        )
        spans = rcv.spans()
        steps = {s.attributes["trainprobe.step"]: s for s in spans if s.name == "step"}
        assert sorted(steps) == [5, 10, 15, 20]
        for number, span in steps.items():
            assert span.trace_id == trace_id_hex(step_trace_id("otel-export", number))
            assert span.attributes["process.pid"] == train.hook.identity.pid
            assert span.resource["service.name"] == "trainprobe-sidecar"
            assert span.resource["deployment.environment"] == "test"
            assert "host.name" in span.resource
            # The worker's own step time (our stamps follow the hook's by microseconds).
            worker_ns = train.step_ends[number] - train.step_ends[number - 1]
            assert abs(span.duration_ns - worker_ns) < 1_000_000
        colls = [s for s in spans if s.name == "allreduce"]
        assert len(colls) == 8  # two buckets of each sampled step, nothing else
        for c in colls:
            step, start, end = train.collectives[c.attributes["trainprobe.collective.seq"]]
            parent = steps[step]
            assert c.parent_id == parent.span_id and c.trace_id == parent.trace_id
            assert c.duration_ns == end - start  # exactly what the worker measured
            assert parent.start_ns <= c.start_ns and c.end_ns <= parent.end_ns
        (phase,) = [s for s in spans if s.name == "phase checkpoint"]
        assert phase.trace_id == steps[10].trace_id
        assert 150e6 <= phase.duration_ns < 400e6
        assert phase.start_ns >= steps[10].end_ns

        # Metrics over OTLP ...
        def points() -> dict[str, list]:
            out: dict[str, list] = {}
            for name, unit, attrs, value in rcv.points():
                out.setdefault(name, []).append((unit, attrs, value))
            return out

        def final(p: dict[str, list]) -> bool:
            # Step 1 and the step that held the checkpoint are not counted as step times.
            return bool(p.get("trainprobe.step.duration")) and (
                p["trainprobe.step.duration"][-1][2][0] == 18
                and p["trainprobe.sync.duration"][-1][2][0] == 40
            )

        pts = wait_for(lambda: (p := points()) and final(p) and p, 10, what="final metrics")
        unit, _, value = pts["hw.gpu.memory.usage"][-1]
        assert (unit, value) == ("By", 3 * GIB)
        assert pts["hw.gpu.memory.limit"][-1][2] == 80 * GIB
        assert pts["trainprobe.heartbeat.age"][-1][0] == "s"
        # ... and on the Prometheus endpoint.
        (usage,) = samples_of(
            families, "hw_gpu_memory_usage_bytes", trainprobe_job_id="otel-export"
        )
        assert usage.value == 3 * GIB
        hist = samples_of(
            families, "trainprobe_sync_duration_seconds", trainprobe_collective_op="allreduce"
        )
        assert any(s.name.endswith("_count") and s.value == 40 for s in hist)
        assert samples_of(families, "trainprobe_heartbeat_age_seconds", trainprobe_rank="0")


def _otlp_json_to_proto(line: str, message: Any) -> Any:
    """Undo OTLP/JSON's hex ids (protobuf's JSON mapping wants base64), then parse."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode()
                if k in ("traceId", "spanId", "parentSpanId") and v
                else fix(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [fix(x) for x in node]
        return node

    return ParseDict(fix(json.loads(line)), message)


def test_without_endpoint_traces_and_metrics_go_to_otlp_json_lines() -> None:
    with sidecar("--trace-every-n-steps", "5", env=FAST_EXPORT) as sc:
        train = TimedTraining(sc.target, job_id="otel-file")
        try:
            train.run(10)
            time.sleep(0.3)
        finally:
            train.hook.close()
        sc.stop()  # flushes the exporters
        traces = (sc.state_dir / "traces.otlp.jsonl").read_text().splitlines()
        metrics = (sc.state_dir / "metrics.otlp.jsonl").read_text().splitlines()
    spans = []
    for line in traces:
        raw = json.loads(line)
        for rs in raw["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    assert len(s["traceId"]) == 32 and len(s["spanId"]) == 16
                    int(s["traceId"], 16)
                    assert isinstance(s["kind"], int)  # OTLP/JSON: enums as integers
        spans += list(flatten_spans(_otlp_json_to_proto(line, ExportTraceServiceRequest())))
    steps = sorted(s.attributes["trainprobe.step"] for s in spans if s.name == "step")
    assert steps == [5, 10]
    want = trace_id_hex(step_trace_id("otel-file", 10))
    assert next(s.trace_id for s in spans if s.attributes.get("trainprobe.step") == 10) == want
    names = set()
    for line in metrics:
        req = _otlp_json_to_proto(line, ExportMetricsServiceRequest())
        names |= {
            m.name for rm in req.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        }
    assert {"trainprobe.step.duration", "hw.gpu.memory.usage", "trainprobe.heartbeat.age"} <= names


def test_metrics_port_in_use_is_a_clear_startup_error() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        workdir = short_tmpdir()
        proc = subprocess.run(
            [
                PYTHON,
                "-m",
                "trainprobe.sidecar",
                "--listen",
                f"unix://{workdir}/s.sock",
                "--state-dir",
                str(workdir / "state"),
                "--metrics-port",
                str(port),
                "--metrics-host",
                "127.0.0.1",
            ],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1
    assert f"metrics_port: cannot serve metrics on 127.0.0.1:{port}" in proc.stderr


def test_a_bad_standard_variable_is_a_clear_startup_error() -> None:
    workdir = short_tmpdir()
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "trainprobe.sidecar",
            "--listen",
            f"unix://{workdir}/s.sock",
            "--state-dir",
            str(workdir / "state"),
            "--otlp-endpoint",
            "http://127.0.0.1:4317",
        ],
        env=child_env(OTEL_EXPORTER_OTLP_COMPRESSION="zstd-ish"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cannot start telemetry" in proc.stderr
    assert "OTEL_EXPORTER_OTLP_COMPRESSION" in proc.stderr
    assert "Traceback" not in proc.stderr


_WITHOUT_OTEL = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('opentelemetry', 'prometheus_client'):\n"
    "            raise ImportError('No module named ' + repr(name))\n"
    "sys.meta_path.insert(0, Block())\n"
    "from trainprobe.sidecar.cli.sidecar import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("explicit", [False, True])
def test_without_opentelemetry_installed(explicit: bool) -> None:
    """GPU machines lack OpenTelemetry: by default the sidecar runs without it.

    The packages are installed here, so an import blocker stands in for their
    absence; everything else is the real CLI.
    """
    workdir = short_tmpdir()
    args = ["--listen", f"unix://{workdir}/s.sock", "--state-dir", str(workdir / "state")]
    if explicit:
        args += ["--metrics-port", str(free_port())]
    proc = subprocess.Popen(
        [PYTHON, "-c", _WITHOUT_OTEL, *args],
        env=child_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        if explicit:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 1
            assert "metrics_port need the OpenTelemetry exporters" in out
            return
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "ready on" in line:
                break
        text = "".join(lines)
        assert "telemetry off: OpenTelemetry is not installed" in text
        assert "ready on" in text
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)


def test_sidecar_and_hook_import_no_opentelemetry() -> None:
    """GPU machines import the sidecar without OpenTelemetry installed."""
    code = (
        "import sys, trainprobe.sidecar.server, trainprobe.sidecar.cli.sidecar, trainprobe.hooks, "
        "trainprobe.sidecar.otel\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'prometheus')))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=child_env(), timeout=60)


def _family_types(body: str) -> dict[str, list[str]]:
    """Each family's TYPE lines in a scrape's text (a family written twice has two)."""
    types: dict[str, list[str]] = {}
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types.setdefault(name, []).append(kind)
    return types


def test_the_first_scrape_already_serves_every_metric_family() -> None:
    from trainprobe.sidecar.otel.metrics.measures import INSTRUMENTS

    port = free_port()
    with sidecar("--metrics-port", str(port), "--metrics-host", "127.0.0.1") as sc:
        # The sidecar says "ready" only after its exporters started: the very first
        # scrape, before any worker exists, must name every family (HELP and TYPE).
        url = f"http://127.0.0.1:{port}/metrics"
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        types = _family_types(body)
        want = {
            "trainprobe_step_duration_seconds": "histogram",
            "trainprobe_sync_duration_seconds": "histogram",
            "trainprobe_collective_arrival_lag_seconds": "histogram",
            "trainprobe_verdicts_total": "counter",
            "trainprobe_actions_total": "counter",
            "trainprobe_heartbeat_age_seconds": "gauge",
            "trainprobe_step_rate_per_second": "gauge",
            "trainprobe_step_last": "gauge",
            "trainprobe_workers": "gauge",
            "hw_gpu_memory_usage_bytes": "gauge",
            "hw_gpu_memory_limit_bytes": "gauge",
            "trainprobe_sidecar_overloaded": "gauge",
            "trainprobe_sidecar_reports_shed": "gauge",
            "trainprobe_sidecar_ingest_lag_seconds": "gauge",
            "trainprobe_sidecar_behind": "gauge",
            "trainprobe_sidecar_own_lag_seconds": "gauge",
            "trainprobe_sidecar_verdicts_deferred": "gauge",
            "trainprobe_jobsync_connected": "gauge",
            "trainprobe_jobsync_lost": "gauge",
            "trainprobe_jobsync_nodes": "gauge",
            "trainprobe_jobsync_ranks": "gauge",
            "trainprobe_jobsync_refused": "gauge",
            "trainprobe_jobsync_pushes_missed": "gauge",
        }
        assert len(want) == len(INSTRUMENTS)  # a new instrument belongs in this list
        # target_info is the exporter's resource family, written once any data is in
        # (the sidecar's own gauges have a value from the start).
        assert {n: k for n, (k, *_) in types.items() if n != "target_info"} == want
        assert "# HELP trainprobe_step_duration_seconds Training step time" in body

        # Once data arrives, the exporter's own families replace the empty ones:
        # each family still once, now with samples.
        train = TimedTraining(sc.target, job_id="first-scrape")
        try:
            train.run(10)
            families = wait_for(
                lambda: (f := scrape(port)) and samples_of(f, "hw_gpu_memory_usage_bytes") and f,
                10,
                what="gpu memory on the scrape",
            )
            body = urllib.request.urlopen(url, timeout=5).read().decode()
        finally:
            train.hook.close()
    assert all(len(kinds) == 1 for kinds in _family_types(body).values()), body
    assert samples_of(families, "trainprobe_step_duration_seconds", trainprobe_rank="0")
    assert {n: k for n, (k, *_) in _family_types(body).items() if n in want} == want
