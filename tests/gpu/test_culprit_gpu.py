"""Stacks and the Flight Recorder of a rank stuck in NCCL (marker ``gpu``).

One NCCL rank (world size 1, tests/workers/nccl_delay.py) has its allreduce
held back on the GPU by ``torch.cuda._sleep``; a real sidecar sees the
collective in flight, and before anything else reads the rank's Python
stacks and the Flight Recorder's in-flight entries into the incident. No Ray
or OpenTelemetry here: the device machine has neither. ``--on-hung observe``:
nothing is killed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.support import PYTHON, REPO, child_env, read_jsonl, short_tmpdir, sidecar, wait_for

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU with NCCL"),
]
WORKER = REPO / "tests" / "workers" / "nccl_delay.py"


def test_stacks_and_flight_recorder_of_a_delayed_nccl_collective() -> None:
    workdir = short_tmpdir()
    progress = workdir / "progress.jsonl"
    with sidecar(
        "--sync-timeout-s", "2", "--stall-timeout-s", "60", "--heartbeat-timeout-s", "30",
        "--on-hung", "observe",
    ) as sc:  # fmt: skip
        with open(workdir / "worker.log", "wb") as log:
            proc = subprocess.Popen(
                [PYTHON, str(WORKER), "30", "20", str(progress)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(TRAINPROBE_TARGET=sc.target),
            )
        try:
            inc = sc.wait_incident(lambda r: r["job_id"] == "nccl1", timeout_s=120)
            delay = wait_for(lambda: read_jsonl(progress), 10, what="delay event")[0]
            if os.environ.get("OUT"):
                Path(os.environ["OUT"], "gpu_incident.json").write_text(json.dumps(inc, indent=1))
            assert proc.poll() is None, (workdir / "worker.log").read_text()[-3000:]
        finally:
            proc.kill()
            proc.wait(30)
    assert inc["rule"] == "sync_inflight" and inc["evidence"]["0"]["op"] == "all_reduce"
    assert inc["time"] - delay["t"] < 2.0 + 1.5  # sync_timeout_s and a report or two
    d = inc["diagnosis"]
    # One rank, in flight: nobody to blame but the collective itself.
    assert d["kind"] == "all_in_flight" and d["culprits"] == []
    assert inc["targets"] == [0] and inc["action"] == "observe"  # on_inconclusive=kill_stalled
    stacks = d["stacks"]["0"]
    assert stacks["method"] == "in-process"
    assert stacks["where"].startswith("nccl_delay.py:") and "wait_for_gpu" in stacks["where"]
    fr = stacks["flight_recorder"]
    assert isinstance(fr, dict) and fr["source"] in ("_dump_nccl_trace_json", "_dump_fr_trace_json")
    entries = fr["entries"]
    assert entries and all(not e.get("retired", False) for e in entries)
    held = [e for e in entries if "all_reduce" in e.get("profiling_name", "")]
    assert held and held[-1]["state"] in ("scheduled", "started"), entries[-3:]
