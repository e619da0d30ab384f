"""Helpers shared by the benchmarks: statistics, processes, results files.

Every bench script writes one JSON result (``--json``) that records the exact
command that produced it; ``bench/render.py`` turns those files into
docs/PERFORMANCE.md and its plots, so no figure is ever typed by hand.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def add_repo_to_path() -> None:
    """Make ``tests.support`` and this checkout's packages importable first."""
    for p in (REPO, REPO / "sidecar", REPO / "hooks", REPO / "proto"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))


def sidecar_env(src: str) -> dict[str, str]:
    """Run the sidecar from another checkout's ``sidecar/`` (A/B in one run); the wire
    (proto) and the hooks stay this checkout's. Packages the machine lacks may come
    in on PYTHONPATH: kept after the tree's."""
    if not src:
        return {}
    roots = [str(Path(src).resolve() / "sidecar"), str(REPO / "proto"), str(REPO / "hooks")]
    extra = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    return {"PYTHONPATH": os.pathsep.join(roots + extra)}


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in 0..1; nan for no data."""
    if not xs:
        return math.nan
    ordered = sorted(xs)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def summarize(xs: Sequence[float]) -> dict[str, float]:
    """Median, p99, min, max and count of ``xs``."""
    if not xs:
        return {"n": 0, "median": math.nan, "p99": math.nan, "min": math.nan, "max": math.nan}
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "p99": percentile(xs, 0.99),
        "min": min(xs),
        "max": max(xs),
    }


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of ``pid`` (this process by default)."""
    path = f"/proc/{pid or 'self'}/statm"
    with open(path) as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid``."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "loadavg_at_start": [round(x, 2) for x in load],
    }


def command_line() -> str:
    """The command that is running, relative to the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        shown = str(script.relative_to(REPO))
    except ValueError:
        shown = str(script)
    return shlex.join(["python", shown, *sys.argv[1:]])


def write_result(path: str | Path, name: str, data: dict[str, Any], started: float) -> None:
    """Write a result file with its provenance: command, machine, duration."""
    doc = {
        "bench": name,
        "command": command_line(),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_s": round(time.monotonic() - started, 1),
        "machine": machine(),
        **data,
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=float) + "\n")


def fmt_us(ns: float) -> str:
    """Nanoseconds shown as microseconds with sensible precision."""
    us = ns / 1000.0
    if us < 10:
        return f"{us:.3f} µs"
    if us < 100:
        return f"{us:.1f} µs"
    return f"{us:.0f} µs"


def bench_telemetry(prefix: str, env: dict[str, str] | None = None) -> tuple[Any, Any]:
    """A real Registry and the sidecar's Telemetry over it, writing OTLP-JSON lines
    to a fresh directory, as shipped without a collector (export on, every 100th
    step traced). Imported here, at the call: a child that put another sidecar
    tree first on sys.path gets that tree's."""
    import tempfile
    from types import SimpleNamespace

    from trainprobe.sidecar.core.session.registry import Registry
    from trainprobe.sidecar.otel.telemetry import start_telemetry

    settings = SimpleNamespace(
        telemetry=True,
        otlp_endpoint=None,
        state_dir=Path(tempfile.mkdtemp(prefix=prefix)),
        metrics_port=None,
        metrics_host="127.0.0.1",
        trace_every_n_steps=100,
    )
    reg = Registry()
    tel = start_telemetry(settings, reg.workers, env=env or {}, lags=reg.arrivals.lags)
    assert tel is not None
    return reg, tel


def observing_sidecar_cli(prefix: str, **more: Any) -> dict[str, Any]:
    """Flags for an in-process sidecar of the shipped defaults on a private socket,
    every action ``observe`` (a benchmark's fleet must not be killed)."""
    import tempfile

    state = Path(tempfile.mkdtemp(prefix=prefix))
    return {
        "listen": [f"unix://{state}/s.sock"],
        "state_dir": str(state),
        "on_hung": "observe",
        "on_unresponsive": "observe",
        "log_level": "warning",
        **more,
    }
