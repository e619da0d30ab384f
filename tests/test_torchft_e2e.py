"""Replica eviction with real parts: a real torchft lighthouse (its own binary),
two replica groups of one process each (real Manager, ProcessGroupGloo,
examples/torchft_train.py), and the real sidecar CLI with its shipped defaults.

A fault in one replica: the sidecar evicts that replica only; the survivor
commits steps again with the same pid; the replacement (started here the way
one torchrun per replica group restarts its worker) heals from the survivor
and ends with equal parameters. A healthy 8 s stall: nothing is evicted.
Timings are the bench's (bench/bench_torchft.py); here they are only bounded
by torchft's own 30 s timeouts, which a fix that did not work would reach.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    PYTHON,
    REPO,
    SidecarProcess,
    child_env,
    free_port,
    read_jsonl,
    short_tmpdir,
    wait_for,
)

pytest.importorskip("torchft")

from trainprobe.proto.lighthouse import HEARTBEAT_TIMEOUT_MS, JOIN_TIMEOUT_MS, MIN_REPLICAS
from trainprobe.sidecar.core.hang.patience import REPLICA_FLOOR_S

SCRIPT = REPO / "examples" / "torchft_train.py"
LIGHTHOUSE = Path(PYTHON).with_name("torchft_lighthouse")
JOB = "ftjob"
pytestmark = pytest.mark.timeout(300)


class FtJob:
    """A lighthouse, a sidecar and two replica groups of one process each."""

    def __init__(
        self, workdir: Path, fault: str, steps: int, fault_at: int = 15, launcher: str = "plain"
    ) -> None:
        self.workdir = workdir
        #: "plain": one process per group hosting its store; "torchrun": one torchrun
        #: --max-restarts per group (docs/DEPLOY.md's recipe), which replaces a lost worker.
        self.launcher = launcher
        self.progress = workdir / "progress.jsonl"
        self.marker = workdir / "fault.done"
        self.stop_file = workdir / "stop.at"
        self.fault, self.steps, self.fault_at = fault, steps, fault_at
        port = free_port()
        self.lighthouse_addr = f"http://127.0.0.1:{port}"
        self.lighthouse = subprocess.Popen(
            [
                str(LIGHTHOUSE),
                "--bind",
                f"[::]:{port}",
                "--min_replicas",
                str(MIN_REPLICAS),
                "--join_timeout_ms",
                str(JOIN_TIMEOUT_MS),
                "--heartbeat_timeout_ms",
                str(HEARTBEAT_TIMEOUT_MS),
            ],
            stdout=open(workdir / "lighthouse.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        self.sidecar = SidecarProcess(workdir).start()
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {"train_0": [], "train_1": []}

    def start(self, replica: str, fault: str = "none") -> subprocess.Popen[bytes]:
        idx = len(self.procs[replica])
        env = child_env(
            RANK="0",
            WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            TORCHFT_LIGHTHOUSE=self.lighthouse_addr,
            TRAINPROBE_TARGET=self.sidecar.target,
            TRAINPROBE_JOB_ID=JOB,
        )
        cmd = [PYTHON, str(SCRIPT), "--own-store", "--replica-id", replica, "--replicas", "2"]
        if self.launcher == "torchrun":
            cmd[1:3] = ["-m", "torch.distributed.run", "--nproc-per-node", "1"]
            cmd[5:5] = ["--master-port", env["MASTER_PORT"], "--max-restarts", "3", str(SCRIPT)]
            for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
                env.pop(k)
        cmd += ["--steps", str(self.steps), "--progress", str(self.progress)]
        cmd += ["--fault", fault, "--fault-at", str(self.fault_at)]
        cmd += ["--fault-marker", str(self.marker), "--stop-file", str(self.stop_file)]
        log = open(self.workdir / f"{replica}-{idx}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs[replica].append(p)
        return p

    def rows(self, event: str, replica: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in read_jsonl(self.progress)
            if r.get("event") == event and (replica is None or r.get("replica") == replica)
        ]

    def records(self, kind: str) -> list[dict[str, Any]]:
        return self.sidecar.incidents(kind)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.workdir.glob("*.log"))
        )

    def close(self) -> None:
        for r in read_jsonl(self.progress):  # a torchrun's workers, by pid (one may be stopped)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(r["pid"]), signal.SIGCONT)
                os.kill(int(r["pid"]), signal.SIGKILL)
        for procs in self.procs.values():
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGCONT)
                        p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)
        self.sidecar.stop()
        self.lighthouse.kill()
        self.lighthouse.wait(10)


@pytest.fixture
def job(request: pytest.FixtureRequest) -> Iterator[FtJob]:
    fault, steps, *launcher = request.param
    j = FtJob(short_tmpdir("tpft-"), fault, steps, launcher=launcher[0] if launcher else "plain")
    try:
        yield j
    except BaseException:
        print(j.logs())
        raise
    finally:
        j.close()


def run_fault(job: FtJob) -> dict[str, Any]:
    """Both replicas train; train_1 faults; the sidecar evicts it; a replacement joins."""
    survivor = job.start("train_0")
    culprit = job.start("train_1", job.fault)
    fault = wait_for(lambda: job.rows("fault"), 120, 0.1, "the fault")[0]
    onset = float(fault["t"])
    # The survivor commits again, in the same process.
    resumed = wait_for(
        lambda: next((r for r in job.rows("step", "train_0") if r["t"] > onset + 0.2), None),
        60,
        0.1,
        "the survivor to commit a step after the fault",
    )
    assert resumed["pid"] == survivor.pid and survivor.poll() is None
    # The culprit is gone (evicted, or it died by itself with kill -9).
    wait_for(lambda: culprit.poll() is not None, 30, 0.1, "the culprit to end")
    # A replacement, as its torchrun would start it, heals from the survivor.
    replacement = job.start("train_1")
    # Both train on until the replacement has healed and committed steps of its own.
    wait_for(
        lambda: len([r for r in job.rows("step", "train_1") if r["pid"] == replacement.pid]) >= 5,
        180,
        0.2,
        "the replacement to commit steps",
    )
    top = max(r["step"] for r in job.rows("step"))
    job.stop_file.write_text(str(top + 10))
    wait_for(lambda: len(job.rows("done")) == 2, 180, 0.2, "both replicas to finish")
    assert survivor.wait(30) == 0 and replacement.wait(30) == 0
    by = {r["replica"]: r for r in job.rows("done")}
    assert by["train_0"]["pid"] == survivor.pid  # never restarted
    assert by["train_1"]["pid"] == replacement.pid
    assert by["train_0"]["params"] == pytest.approx(by["train_1"]["params"], abs=1e-6)
    print(f"{job.fault}: survivor committed again {resumed['t'] - onset:.1f}s after onset")
    return {"onset": onset, "resumed": resumed["t"], "culprit": culprit, "survivor": survivor}


def assert_evicted_once(job: FtJob, culprit_pid: int, survivor_pid: int) -> dict[str, Any]:
    actions = [a for a in job.records("action") if a.get("action") in ("evict", "kill", "restart")]
    evicts = [a for a in actions if a["action"] == "evict"]
    assert len(evicts) == 1, actions
    ev = evicts[0]
    assert ev["evicted_replicas"] == ["train_1"]
    assert ev["replicas_left"] == 1
    assert ev["summary"] == "replica train_1 evicted; 1 replica goes on"
    # 0 kills of the waiting replica: no action record names its pid.
    for a in actions:
        for outcome in (a.get("outcomes") or {}).values():
            assert outcome.get("pid") != survivor_pid, a
    assert set((ev.get("outcomes") or {}).keys()) <= {"1"}
    incident = next(i for i in job.records("incident") if i["id"] == ev["incident_id"])
    assert incident["action"] == "evict"
    assert incident["diagnosis"]["evidence"]["replicas"]["culprits"] == ["train_1"]
    assert 0 not in incident["targets"]
    return ev


def assert_no_waiter_blamed(job: FtJob) -> None:
    """The survivor (rank 0) only waited for the faulty replica: no incident names
    it, the end of the stall included (its long allreduce was a wait, no DEGRADED)."""
    time.sleep(1.5)  # the survivor's reports after the stall are judged
    blamed = [
        (i["verdict"], i["rule"], i["culprits"], i["evidence"])
        for i in job.records("incident")
        if 0 in i.get("culprits", [])
    ]
    assert blamed == [], json.dumps(blamed)
    assert not [i for i in job.records("incident") if i["verdict"] == "DEGRADED"]


@pytest.mark.parametrize("job", [("sleep", 100000)], indirect=True)
def test_a_replica_asleep_in_its_step_is_evicted_and_the_survivor_goes_on(job: FtJob) -> None:
    out = run_fault(job)
    assert_evicted_once(job, out["culprit"].pid, out["survivor"].pid)
    assert_no_waiter_blamed(job)
    decision = next(d for d in job.records("decision") if d.get("action") == "evict")
    assert decision["rule"] == "patience"
    assert decision["patience_s"] == REPLICA_FLOOR_S  # the replicated default, not 90 s
    # Before torchft's own 30 s gloo timeout would have failed the step.
    assert out["resumed"] - out["onset"] < 30


@pytest.mark.parametrize("job", [("stop", 100000)], indirect=True)
def test_a_stopped_replica_is_evicted_at_once(job: FtJob) -> None:
    out = run_fault(job)
    assert_evicted_once(job, out["culprit"].pid, out["survivor"].pid)
    decision = next(d for d in job.records("decision") if d.get("action") == "evict")
    assert decision["rule"] == "stopped" and decision["definitive"]


@pytest.mark.parametrize("job", [("kill9", 100000)], indirect=True)
def test_a_replica_killed_minus_9_costs_the_survivor_nothing(job: FtJob) -> None:
    out = run_fault(job)
    # The culprit died by itself: whatever the sidecar did, it never touched the survivor.
    for a in job.records("action"):
        for outcome in (a.get("outcomes") or {}).values():
            assert outcome.get("pid") != out["survivor"].pid, a
        assert a.get("phase") not in ("peers_of_gone", "job_kill_grace"), a


@pytest.mark.parametrize("job", [("stall8", 45)], indirect=True)
def test_an_8s_stall_that_ends_by_itself_evicts_nothing(job: FtJob) -> None:
    a = job.start("train_0")
    b = job.start("train_1", "stall8")
    wait_for(lambda: len(job.rows("done")) == 2, 240, 0.2, "both replicas to finish")
    assert a.wait(30) == 0 and b.wait(30) == 0
    assert [r.get("action") for r in job.records("action")] == []
    assert {r["pid"] for r in job.rows("done")} == {a.pid, b.pid}
    # It was seen (a verdict is cheap), and its end was recorded as a stall that ended by itself.
    time.sleep(1.0)
    resumed = [d for d in job.records("decision") if d.get("rule") == "resumed"]
    assert resumed, job.records("incident")
    assert_no_waiter_blamed(job)


@pytest.mark.parametrize("job", [("lock", 100000), ("gil", 100000)], indirect=True)
def test_a_deadlocked_or_gil_holding_replica_is_evicted(job: FtJob) -> None:
    out = run_fault(job)
    assert_evicted_once(job, out["culprit"].pid, out["survivor"].pid)
    decision = next(d for d in job.records("decision") if d.get("action") == "evict")
    assert decision["rule"] == "patience" and not decision["definitive"]


@pytest.mark.parametrize("job", [("checkpoint", 45), ("eval", 60)], indirect=True)
def test_a_checkpoint_or_an_eval_on_every_replica_evicts_nothing(job: FtJob) -> None:
    # checkpoint: one replica declares a 15 s checkpoint while the other waits for it;
    # eval: every replica evaluates 5 s every 25 steps.
    a = job.start("train_0", "eval" if job.fault == "eval" else "none")
    b = job.start("train_1", job.fault)
    wait_for(lambda: len(job.rows("done")) == 2, 240, 0.2, "both replicas to finish")
    assert a.wait(30) == 0 and b.wait(30) == 0
    assert [r.get("action") for r in job.records("action")] == []
    assert {r["pid"] for r in job.rows("done")} == {a.pid, b.pid}


@pytest.mark.parametrize("job", [("stop", 100000, "torchrun")], indirect=True)
def test_one_torchrun_per_replica_group_replaces_the_evicted_group_alone(job: FtJob) -> None:
    # docs/DEPLOY.md's recipe: the sidecar evicts the SIGSTOPped group's worker, that
    # group's torchrun starts a new one, which heals from the survivor; the survivor's
    # torchrun and worker never restart.
    agents = [job.start("train_0"), job.start("train_1", job.fault)]
    fault = wait_for(lambda: job.rows("fault"), 120, 0.1, "the fault")[0]
    survivor_pid = job.rows("start", "train_0")[0]["pid"]
    wait_for(
        lambda: [r for r in job.rows("step", "train_0") if r["t"] > fault["t"] + 0.2],
        60,
        0.1,
        "the survivor to commit a step after the fault",
    )
    wait_for(
        lambda: len([r for r in job.rows("step", "train_1") if r["pid"] != fault["pid"]]) >= 5,
        180,
        0.2,
        "train_1's torchrun to restart it and the new worker to commit steps",
    )
    top = max(r["step"] for r in job.rows("step"))
    job.stop_file.write_text(str(top + 10))
    wait_for(lambda: len(job.rows("done")) == 2, 180, 0.2, "both replicas to finish")
    assert [a.wait(60) for a in agents] == [0, 0]
    by = {r["replica"]: r for r in job.rows("done")}
    assert by["train_0"]["pid"] == survivor_pid  # never restarted
    assert [r["pid"] for r in job.rows("start", "train_0")] == [survivor_pid]
    assert len(job.rows("start", "train_1")) == 2  # the evicted group, replaced once
    assert by["train_1"]["pid"] != fault["pid"]
    assert by["train_0"]["params"] == pytest.approx(by["train_1"]["params"], abs=1e-6)
    assert_evicted_once(job, fault["pid"], survivor_pid)
