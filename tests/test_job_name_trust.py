"""A job's name is a client's word, and so is its id: a client that takes
another job's name for its id (or its id for its name) never makes ``--job``
pick its job for the other's. ``--job X`` that is one job's id and another's
name is an error listing both ids; ``--job id:X`` means the id alone.
Real sidecar and hooks for status; an incident log as the sidecar writes it
for incidents and report.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.raw_client import connect, stepping
from tests.support import PYTHON, REPO, child_env, ctl, sidecar, wait_for
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2

WORKER = REPO / "tests" / "workers" / "hang_after.py"
NOWHERE = "unix:///nonexistent/trainprobe-test.sock"


def incident(key: str, job: str, name: str = "", text: str = "") -> dict[str, Any]:
    return {
        "type": "incident", "id": key, "time": 1_780_000_000.0, "job_id": job,
        "job_name": name, "rule": "stall", "verdict": "HUNG", "ranks": [0, 1],
        "pids": [10, 11], "culprits": [1], "waiting": [0], "action": "kill",
        "detection_latency_s": 3.0,
        "diagnosis": {"kind": "straggler", "text": text, "where": {"1": "a.py:3"}},
    }  # fmt: skip


def test_a_job_id_that_is_another_jobs_name_is_not_that_job_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    records = [
        incident("evil-1", "train", text="the attacker's story"),  # first in the log
        incident("real-1", "job-real", "train", text="the real story"),
        incident("evil-2", "job-evil", "job-real", text="the attacker's other story"),
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    for ref, ids in (("train", "'train', 'job-real'"), ("job-real", "'job-real', 'job-evil'")):
        r = ctl("incidents", "--log", str(log), "--job", ref)
        assert r.returncode == 1, (ref, r.stdout)
        assert "the attacker's" not in r.stdout and "the real story" not in r.stdout
        assert ids in r.stderr and f"--job id:{ref}" in r.stderr, r.stderr
        r = ctl(
            "report", "--target", NOWHERE, "--job", ref, "--log", str(log),
            "--watch-s", "0", "--out", str(tmp_path / "page"),
        )  # fmt: skip
        assert r.returncode == 1 and ids in r.stderr, (ref, r.stdout, r.stderr)
    r = ctl("incidents", "--json", "--log", str(log), "--job", "id:train")
    assert r.returncode == 0, r.stderr
    assert [i["id"] for i in json.loads(r.stdout)] == ["evil-1"]
    r = ctl("incidents", "--json", "--log", str(log), "--job", "id:job-real")
    assert [i["id"] for i in json.loads(r.stdout)] == ["real-1"]


def test_a_live_job_id_that_is_another_jobs_name_is_not_that_job() -> None:
    with sidecar() as sc:
        jobs = {"job-real": "train", "train": ""}
        workers = [
            subprocess.Popen(
                [PYTHON, str(WORKER), job, "100000"],
                env=child_env(TRAINPROBE_TARGET=sc.target, TRAINPROBE_JOB_NAME=name),
                stdout=subprocess.DEVNULL,
            )
            for job, name in jobs.items()
        ]
        try:
            wait_for(lambda: "job-real" in ctl("status", "--target", sc.target).stdout, 30)
            wait_for(lambda: ctl("status", "--target", sc.target, "--job", "id:train").stdout, 30)
            for cmd in ("status", "diagnose", "top"):
                extra = ["--once"] if cmd == "top" else []
                r = ctl(cmd, "--target", sc.target, "--job", "train", *extra)
                assert r.returncode == 1, (cmd, r.stdout)
                assert "'train', 'job-real'" in r.stderr, (cmd, r.stderr)
            r = ctl("status", "--json", "--target", sc.target, "--job", "id:train")
            assert r.returncode == 0, r.stderr
            assert {w["jobId"] for w in json.loads(r.stdout)["workers"]} == {"train"}
        finally:
            for w in workers:
                w.kill()
                w.wait()


def _unverified(target: str, job: str, rank: int, name: str, stop: threading.Event) -> None:
    """A raw client with no identity ticket: a Hello naming ``job``, then a step a report."""
    hello = probe_pb2.Hello(
        protocol_version=PROTOCOL_VERSION, hook_version="x", job_id=job,
        job_name=name, rank=rank, world_size=8, host="h", pid=os.getpid(),
        interval_ms=100, session_secret=os.urandom(16),
    )  # fmt: skip
    connect(target, stepping(hello, stop))


def test_an_unverified_session_cannot_rename_a_verified_job() -> None:
    # First in, before the real job starts: a session in the real job's id that
    # calls it otherwise, and a job whose id is the real job's name. Before, the
    # first name won, so the real job lost its name and --job train was the fake.
    with sidecar() as sc:
        stop = threading.Event()
        clients = [
            threading.Thread(target=_unverified, args=(sc.target, *a, stop), daemon=True)
            for a in (("job-real", 7, "renamed"), ("train", 0, ""))
        ]
        for c in clients:
            c.start()
        wait_for(lambda: ctl("status", "--target", sc.target).stdout.count("job ") == 2, 30)
        real = subprocess.Popen(
            [PYTHON, str(WORKER), "job-real", "100000"],
            env=child_env(TRAINPROBE_TARGET=sc.target, TRAINPROBE_JOB_NAME="train"),
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: f"{real.pid}" in ctl("status", "--target", sc.target).stdout, 30)
            r = ctl("status", "--target", sc.target, "--job", "train")
            assert r.returncode == 1 and "'train', 'job-real'" in r.stderr, (r.stdout, r.stderr)
            r = ctl("status", "--target", sc.target, "--job", "renamed")
            assert "job-real" not in r.stdout, r.stdout
        finally:
            stop.set()
            real.kill()
            real.wait()
