"""Replicated jobs on one machine: two torchft replica groups, each its own torchrun.

The recipe of docs/DEPLOY.md ("torchrun with replica groups"): one
``torchft_lighthouse`` for the job, one ``torchrun --max-restarts`` per
replica group running ``examples/torchft_train.py`` (real Manager,
ProcessGroupGloo), and, in mode ``trainprobe``, the sidecar CLI with its
shipped defaults. Mode ``alone`` runs no sidecar (torchft by itself; the hooks
find none and only retry in the background). ``--launcher plain`` starts each
group as one plain process instead (``--own-store``), and the bench then
starts the replacement itself once the culprit is gone.

Also here: the non-replicated torchrun restart (``examples/torchrun_train.py``,
2 ranks in one torchrun, ``--max-restarts``, a rank sleeping in its step) under
the sidecar's shipped defaults, measured from onset to every rank stepping again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support import (
    PYTHON,
    REPO,
    SidecarProcess,
    child_env,
    free_port,
    read_jsonl,
    short_tmpdir,
)

__all__ = ["fault_trial", "healthy_trial", "torchrun_restart_trial"]

SCRIPT = REPO / "examples" / "torchft_train.py"
LIGHTHOUSE = Path(PYTHON).with_name("torchft_lighthouse")
DESTRUCTIVE = ("evict", "kill", "restart")


class Job:
    """A lighthouse, maybe a sidecar, and replica groups started on demand."""

    def __init__(self, mode: str, args: Any) -> None:
        self.work = short_tmpdir("tpftb-")
        self.progress, self.marker = self.work / "progress.jsonl", self.work / "fault.done"
        self.stop_file = self.work / "stop.at"
        self.launcher = args.launcher
        port = free_port()
        self.lighthouse_addr = f"http://127.0.0.1:{port}"
        self.lighthouse = subprocess.Popen(
            [
                str(LIGHTHOUSE),
                *("--bind", f"[::]:{port}", "--min_replicas", "1"),
                *("--join_timeout_ms", str(args.join_timeout_ms)),
                *("--heartbeat_timeout_ms", str(args.heartbeat_timeout_ms)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.sidecar = SidecarProcess(self.work).start() if mode == "trainprobe" else None
        self.target = self.sidecar.target if self.sidecar else f"unix://{self.work}/none.sock"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.fault_at = args.fault_at

    def start(self, replica: str, fault: str = "none", steps: int = 100000) -> subprocess.Popen:
        env = child_env(
            TORCHFT_LIGHTHOUSE=self.lighthouse_addr,
            TRAINPROBE_TARGET=self.target,
            TRAINPROBE_JOB_ID="bench-ft",
        )
        script = [str(SCRIPT), "--replica-id", replica, "--replicas", "2", "--steps", str(steps)]
        script += ["--progress", str(self.progress), "--fault", fault]
        script += ["--fault-at", str(self.fault_at), "--fault-marker", str(self.marker)]
        script += ["--stop-file", str(self.stop_file)]
        if self.launcher == "torchrun":
            cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "1"]
            cmd += ["--master-port", str(free_port()), "--max-restarts", "3", *script]
        else:
            env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
            env["MASTER_PORT"] = str(free_port())
            cmd = [PYTHON, *script, "--own-store"]
        log = open(self.work / f"{replica}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append(p)
        return p

    def rows(self, event: str, replica: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in read_jsonl(self.progress)
            if r.get("event") == event and (replica is None or r.get("replica") == replica)
        ]

    def actions(self) -> list[dict[str, Any]]:
        if self.sidecar is None:
            return []
        return [a for a in self.sidecar.incidents("action") if a.get("action") in DESTRUCTIVE]

    def close(self) -> None:
        # The workers first, by pid (a SIGSTOPped or sleeping one ignores its torchrun).
        for r in read_jsonl(self.progress):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(r["pid"]), signal.SIGCONT)
                os.kill(int(r["pid"]), signal.SIGKILL)
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
            if p.poll() is None:
                p.kill()
                p.wait(10)
        if self.sidecar is not None:
            self.sidecar.stop()
        self.lighthouse.kill()
        self.lighthouse.wait(10)


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def waiting_kills(actions: list[dict[str, Any]], pids: set[int]) -> int:
    """Actions that ended (or tried to end) one of ``pids``: a waiting replica's processes."""
    return sum(
        1
        for a in actions
        for o in (a.get("outcomes") or {}).values()
        if isinstance(o, dict) and o.get("pid") in pids
    )


def fault_trial(fault: str, mode: str, args: Any) -> dict[str, Any]:
    job = Job(mode, args)
    out: dict[str, Any] = {"fault": fault, "mode": mode, "launcher": job.launcher}
    out["load"] = round(os.getloadavg()[0], 2)
    try:
        job.start("train_0")
        job.start("train_1", fault)
        deadline = time.monotonic() + 180
        while not job.rows("fault", "train_1") and time.monotonic() < deadline:
            time.sleep(0.05)
        faults = job.rows("fault", "train_1")
        if not faults:
            out["error"] = "no fault"
            return out
        onset, culprit_pid = float(faults[0]["t"]), int(faults[0]["pid"])
        survivor_pid = int(job.rows("start", "train_0")[0]["pid"])
        end = time.time() + args.limit_s
        gone_at = resumed_at = replaced_at = None
        while time.time() < end and (resumed_at is None or replaced_at is None):
            now = time.time()
            if gone_at is None and not pid_alive(culprit_pid):
                gone_at = now
                if job.launcher == "plain":
                    job.start("train_1")  # as its torchrun would restart it
            if resumed_at is None:
                steps = [r for r in job.rows("step", "train_0") if r["t"] > onset + 0.2]
                resumed_at = steps[0]["t"] if steps else None
            if gone_at is not None and replaced_at is None:
                steps = [r for r in job.rows("step", "train_1") if r["pid"] != culprit_pid]
                replaced_at = steps[0]["t"] if steps else None
            if resumed_at is not None and gone_at is None and mode == "alone":
                break  # torchft alone never ends a hung replica: nothing more to wait for
            time.sleep(0.05)
        survivor_pids = {r["pid"] for r in job.rows("step", "train_0")}
        actions = job.actions()
        out.update(
            survivor_resumed_s=round(resumed_at - onset, 2) if resumed_at else None,
            survivor_same_pid=survivor_pids == {survivor_pid} and pid_alive(survivor_pid),
            culprit_gone_s=round(gone_at - onset, 2) if gone_at else None,
            replacement_stepping_s=round(replaced_at - onset, 2) if replaced_at else None,
            evictions=sum(1 for a in actions if a["action"] == "evict"),
            waiting_replica_kills=waiting_kills(actions, {survivor_pid}),
            decisions=[
                {k: d.get(k) for k in ("rule", "patience_s", "stalled_s")}
                for d in (job.sidecar.incidents("decision") if job.sidecar else [])
                if d.get("action") in DESTRUCTIVE
            ],
        )
        return out
    finally:
        job.close()


#: Healthy cases: (faults of train_0 and train_1, steps to run).
HEALTHY = {
    "stall8": (("none", "stall8"), 45),  # one replica stalls 8 s, then goes on
    "checkpoint": (("none", "checkpoint"), 45),  # a declared 15 s checkpoint phase
    "eval": (("eval", "eval"), 60),  # every replica evaluates 5 s every 25 steps
}


def healthy_trial(case: str, args: Any) -> dict[str, Any]:
    (f0, f1), steps = HEALTHY[case]
    job = Job("trainprobe", args)
    out: dict[str, Any] = {"case": case, "launcher": job.launcher}
    out["load"] = round(os.getloadavg()[0], 2)
    try:
        t0 = time.time()
        procs = [job.start("train_0", f0, steps), job.start("train_1", f1, steps)]
        deadline = time.monotonic() + 300
        while len(job.rows("done")) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        starts = {r["replica"]: r["pid"] for r in job.rows("start")}
        done = {r["replica"]: r["pid"] for r in job.rows("done")}
        time.sleep(1.0)  # the sidecar's last round
        actions = job.actions()
        resumed = (
            [
                d.get("stalled_s")
                for d in job.sidecar.incidents("decision")
                if d.get("rule") == "resumed"
            ]
            if job.sidecar
            else []
        )
        out.update(
            finished=len(done) == 2 and all(p.wait(30) == 0 for p in procs),
            restarted=len(job.rows("start")) - 2,
            same_pids=done == starts,
            evictions=sum(1 for a in actions if a["action"] == "evict"),
            kills=len(actions),
            waiting_replica_kills=waiting_kills(actions, set(starts.values())),
            stalls_seen_s=resumed,
            wall_s=round(time.time() - t0, 1),
        )
        return out
    finally:
        job.close()


TORCHRUN_SCRIPT = REPO / "examples" / "torchrun_train.py"


def torchrun_restart_trial(args: Any) -> dict[str, Any]:
    """Non-replicated: 2 ranks in one torchrun; rank 1 sleeps; shipped defaults."""
    work = short_tmpdir("tptrb-")
    progress = work / "progress.jsonl"
    sidecar = SidecarProcess(work).start()
    out: dict[str, Any] = {"orchestrator": "torchrun", "load": round(os.getloadavg()[0], 2)}
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["--max-restarts", "1", str(TORCHRUN_SCRIPT), "--ckpt-dir", str(work / "ckpt")]
    cmd += ["--steps", "40", "--ckpt-every", "5", "--hang-rank", "1", "--hang-at", "30"]
    cmd += ["--progress", str(progress)]
    try:
        with open(work / "torchrun.log", "wb") as log:
            run = subprocess.run(
                cmd,
                env=child_env(TRAINPROBE_TARGET=sidecar.target),
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=args.restart_limit_s,
            )
        events = read_jsonl(progress)
        hang = next(e for e in events if e["event"] == "hang")
        second = [e for e in events if e["event"] == "step" and e.get("attempt") == 1]
        by_rank: dict[int, float] = {}
        for e in second:
            by_rank.setdefault(int(e["rank"]), float(e["t"]))
        acted = [d for d in sidecar.incidents("decision") if d.get("act")]
        out.update(
            exit_code=run.returncode,
            all_stepping_s=round(max(by_rank.values()) - hang["t"], 2)
            if len(by_rank) == 2
            else None,
            decided_s=acted[0].get("decided_after_s") if acted else None,
            rule=acted[0].get("rule") if acted else None,
            patience_s=acted[0].get("patience_s") if acted else None,
        )
    except (subprocess.TimeoutExpired, StopIteration) as err:
        out["error"] = f"{type(err).__name__}: {err}"
    finally:
        sidecar.stop()
    return out
