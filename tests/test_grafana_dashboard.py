"""The Grafana dashboard against a real Prometheus scraping a live sidecar.

Two real gloo ranks (tests/workers/ddp_worker.py, ``--watch-ddp``) train and report
to a real sidecar; rank 1 sleeps once (a straggler), later hangs and is
killed, so verdicts and actions exist. A real Prometheus server (Debian's
``prometheus``; ``make test`` installs it) scrapes the sidecar's
``--metrics-port`` every second. Every panel and annotation query of
deploy/grafana/trainprobe-dashboard.json, with Grafana's variables substituted
as Grafana would, must return data over the range the job ran.

Faked, because it cannot run here: a GPU. This machine has none, so the hook
sends no GPU memory; one extra stream (rank 2 of the same job, a plain gRPC
client in this test) reports allocator figures of a pretend device so the
GPU panel has a series. Everything else is real.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.raw_client import connect, stepping
from tests.support import Workers, free_port, short_tmpdir, sidecar, wait_for
from trainprobe.proto import probe_pb2

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "trainprobe-dashboard.json"
JOB = "dash"
#: $job as Grafana expands a multi-value selection of both jobs.
JOB_VALUE = "(dash|dash-gpu)"
#: What Grafana puts for $__rate_interval at a 1 s scrape interval is 4 scrapes
#: at least; a little more keeps a rate's two points inside on a loaded machine.
RATE_INTERVAL = "6s"


def panel_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """Every query of the dashboard by panel (or annotation) title, variables substituted."""
    out = {}
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            out[f"{panel['title']} [{t['refId']}]"] = t["expr"]
    for ann in dashboard["annotations"]["list"]:
        if "expr" in ann:
            out[f"annotation {ann['name']}"] = ann["expr"]
    return {
        name: expr.replace("$__rate_interval", RATE_INTERVAL).replace("$job", JOB_VALUE)
        for name, expr in out.items()
    }


def test_every_query_names_a_variable_the_dashboard_defines() -> None:
    dash = json.loads(DASHBOARD.read_text())
    names = {v["name"] for v in dash["templating"]["list"]}
    assert names == {"datasource", "job"}
    for expr in panel_queries(dash).values():
        assert "$" not in expr, expr
    kinds = {p["type"] for p in dash["panels"]}
    assert "heatmap" in kinds


class Prometheus:
    """A real Prometheus on 127.0.0.1, its storage in a temp dir, killed at the end."""

    def __init__(self, workdir: Path, scrape_port: int) -> None:
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: trainprobe\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{scrape_port}']\n"
        )
        self.log = workdir / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    shutil.which("prometheus") or "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--web.enable-lifecycle",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: self._ready(), 60, what="prometheus ready")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{self.log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def api(self, path: str, **params: object) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def gpu_standin(target: str, stop: threading.Event) -> None:
    """Rank 2 of the job on a pretend GPU: a real stream, fake device figures."""
    path = target.removeprefix("unix://")

    hello = probe_pb2.Hello(
        protocol_version=1,
        hook_version="test-gpu-standin",
        job_id="dash-gpu",
        rank=0,
        local_rank=0,
        world_size=1,
        host="gpu-standin.invalid",
        pid=1,
        interval_ms=200,
    )
    gpu = probe_pb2.GpuMemory(
        allocated_bytes=1 << 30, reserved_bytes=2 << 30, peak_allocated_bytes=1 << 30
    )

    def messages() -> Iterator[probe_pb2.WorkerMessage]:
        yield from stepping(hello, stop, every_s=0.2, gpu_memory=gpu)
        yield probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye(reason="done"))

    connect(f"unix://{path}", messages())


@pytest.mark.timeout(240)
def test_every_panel_query_returns_data_from_a_real_prometheus() -> None:
    if shutil.which("prometheus") is None:
        pytest.skip(
            "no prometheus server here: it is Debian's package prometheus, which `make test` "
            "installs when run as root"
        )

    metrics_port = free_port()
    tmp = short_tmpdir()
    with sidecar(
        "--metrics-port",
        str(metrics_port),
        "--stall-timeout-s",
        "3",
        "--stall-floor-s",
        "3",
        "--hang-patience-s",  # the kill at the verdict: its annotation is a panel
        "0",
    ) as sc:
        prom = Prometheus(tmp, metrics_port)
        try:
            t_start = time.time()
            stop = threading.Event()
            standin = threading.Thread(target=gpu_standin, args=(sc.target, stop), daemon=True)
            standin.start()
            with Workers(
                2,
                sc.target,
                tmp,
                job_id=JOB,
                args=[
                    "--steps",
                    "100000",
                    "--step-s",
                    "0.05",
                    "--interval-ms",
                    "200",
                    "--watch-ddp",
                    "--delay-backward-rank",
                    "1",
                    "--delay-backward-at",
                    "40",
                    "--delay-backward-s",
                    "1.5",
                    "--hang-rank",
                    "1",
                    "--hang-at",
                    "120",
                ],
            ) as w:
                sc.wait_incident(lambda r: r["verdict"] == "HUNG", timeout_s=150)
                wait_for(lambda: sc.incidents("action"), 30, what="the kill")
                w.wait(30)
            # Two more scrapes after the kill, so the counters' change is stored.
            time.sleep(3)
            queries = panel_queries(json.loads(DASHBOARD.read_text()))
            empty = {}
            for name, expr in queries.items():
                data = prom.api(
                    "query_range", query=expr, start=t_start, end=time.time(), step="1s"
                )
                if not data["result"]:
                    empty[name] = expr
            assert not empty, f"queries without data: {json.dumps(empty, indent=1)}"
            lag = prom.api(
                "query",
                query="max by (trainprobe_rank) (max_over_time("
                'trainprobe_collective_arrival_lag_seconds_sum{trainprobe_job_id="dash"}[5m]))',
            )
            assert {r["metric"]["trainprobe_rank"] for r in lag["result"]} == {"0", "1"}
        finally:
            stop.set()
            standin.join(10)
            prom.close()


@pytest.mark.timeout(120)
def test_a_real_prometheus_knows_every_family_from_its_first_scrape() -> None:
    """Before any worker reports, Prometheus's first scrape already carries the
    trainprobe families (their type and help), so metadata-driven tools
    (Grafana's metric browser) see them on an idle sidecar."""
    if shutil.which("prometheus") is None:
        pytest.skip(
            "no prometheus server here: it is Debian's package prometheus, which `make test` "
            "installs when it runs as root"
        )
    from trainprobe.sidecar.otel.metrics.measures import INSTRUMENTS

    workdir = short_tmpdir("tpprom-")
    metrics_port = free_port()
    with sidecar("--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"):
        prom = Prometheus(workdir, metrics_port)
        try:

            def families() -> dict[str, Any] | None:
                meta = prom.api("targets/metadata", match_target='{job="trainprobe"}')
                ours = ("trainprobe_", "hw_")
                got = {m["metric"]: m for m in meta if m["metric"].startswith(ours)}
                return got if len(got) >= len(INSTRUMENTS) else None

            got = wait_for(families, 60, what="trainprobe families in Prometheus's metadata")
            assert got["trainprobe_step_duration_seconds"]["type"] == "histogram"
            assert got["trainprobe_verdicts"]["type"] == "counter"
            assert got["trainprobe_heartbeat_age_seconds"]["help"].startswith("Seconds since")
            # Nothing has reported: the families come with no series.
            assert prom.api("query", query="trainprobe_step_last")["result"] == []
        finally:
            prom.close()
