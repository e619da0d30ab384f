"""One hung training job under one liveness tool, for the detection benchmark.

A :class:`Job` launches ``tests/workers/ddp_worker.py`` ranks the way each tool is
meant to be used, and reads back what happened:

- ``tp_explicit`` / ``tp_auto`` / ``tp_default``: ranks started directly (as in
  the tests), each with trainprobe's hook, watched by a shared real sidecar
  process; verdict = the sidecar's incident time.
- ``nvrx``: ``ft_launcher`` (nvidia-resiliency-ext 0.4.1) with its default
  config; every rank calls ``RankMonitorClient.send_heartbeat()`` after each step
  and ``calculate_and_set_hb_timeouts()`` after step 20; verdict = the first
  rank monitor's "FT timeout elapsed" log line.
- ``gloo``: ``torchrun`` and a gloo process group created with
  ``timeout=--pg-timeout-s``; verdict = the first rank whose collective raised.

Onset is the wall time the hanging rank logged just before hanging. Deaths
are seen by polling each rank's pid (a zombie counts as dead).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.common import pid_gone
from tests.support import DDP_WORKER, SidecarProcess, Workers, child_env, read_jsonl

TP_TOOLS = ("tp_explicit", "tp_auto", "tp_default")
_NVRX_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[WARNING\].*FT timeout elapsed"
)


@dataclass
class JobSpec:
    tool: str
    kind: str
    ranks: int
    hang_rank: int
    hang_at: int
    step_s: float
    pg_timeout_s: float = 5.0
    #: A control job never hangs: any kill of it is a false kill.
    control: bool = False


@dataclass
class Job:
    spec: JobSpec
    workdir: Path
    job_id: str
    start_file: Path
    sidecar: SidecarProcess | None = None
    launcher: subprocess.Popen[bytes] | None = None
    workers: Workers | None = None
    progress: Path = field(init=False)
    log_path: Path = field(init=False)
    pids: dict[int, int] = field(default_factory=dict)
    dead_at: dict[int, float] = field(default_factory=dict)
    onset: float | None = None
    first_error: float | None = None
    done_ranks: set[int] = field(default_factory=set)
    verdict_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    _offset: int = 0
    #: What each rank runs, and which tools are trainprobe's (ranks started
    #: directly, a sidecar watching); fault_jobs.FaultJob runs its own.
    script: ClassVar[Path] = DDP_WORKER
    tp_tools: ClassVar[tuple[str, ...]] = TP_TOOLS

    def __post_init__(self) -> None:
        self.progress = self.workdir / f"{self.job_id}.jsonl"
        self.log_path = self.workdir / f"{self.job_id}.log"

    # -- launching -------------------------------------------------------------------

    def worker_args(self) -> list[str]:
        s = self.spec
        args = ["--step-s", str(s.step_s), "--start-file", str(self.start_file)]
        if s.control:
            # 60 steps with a declared 1.5 s checkpoint every 20: longer than the
            # auto threshold, so only the phase keeps it from being killed.
            args += ["--steps", "60", "--ckpt-every", "20", "--ckpt-s", "1.5"]
        else:
            args += ["--steps", "100000"]
            args += ["--hang-rank", str(s.hang_rank), "--hang-at", str(s.hang_at)]
            args += ["--hang-how", "stop" if s.kind == "stop" else s.kind]
        if s.tool in TP_TOOLS:
            return [*args, "--interval-ms", "100"]
        args.append("--no-hook")
        if s.tool == "nvrx":
            return [*args, "--nvrx", "--nvrx-calc-at", "20"]
        return [*args, "--pg-timeout-s", str(s.pg_timeout_s)]

    def launch(self) -> None:
        s = self.spec
        if s.tool in self.tp_tools:
            assert self.sidecar is not None
            self.workers = Workers(
                s.ranks,
                self.sidecar.target,
                self.workdir,
                args=self.worker_args(),
                job_id=self.job_id,
                script=self.script,
            )
            self.progress = self.workers.progress  # it names its own progress file
            return
        if s.tool == "nvrx":
            launcher = [str(Path(sys.executable).with_name("ft_launcher"))]
        else:
            launcher = [sys.executable, "-m", "torch.distributed.run"]
        cmd = [
            *launcher,
            "--standalone",
            "--nproc-per-node",
            str(s.ranks),
            "--max-restarts",
            "0",
            str(self.script),
            "--progress",
            str(self.progress),
            *self.worker_args(),
        ]
        with open(self.log_path, "wb") as log:
            self.launcher = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
            )

    # -- observing -------------------------------------------------------------------

    def ready(self) -> bool:
        """Every rank has started (and waits for the start file)."""
        starts = [r for r in read_jsonl(self.progress) if r.get("event") == "start"]
        self.pids = {r["rank"]: r["pid"] for r in starts}
        return len(self.pids) == self.spec.ranks

    def poll_deaths(self, now: float) -> None:
        """Record the first time each rank's pid is seen gone."""
        for rank, pid in self.pids.items():
            if rank not in self.dead_at and pid_gone(pid):
                self.dead_at[rank] = now

    def poll_events(self) -> None:
        """Read new progress events, and the tool's verdict once it exists."""
        for r in self._new_events():
            event = r.get("event")
            if event == "hang" and self.onset is None:
                self.onset = r["t"]
            elif event == "error" and self.first_error is None:
                self.first_error = r["t"]
            elif event == "done":
                self.done_ranks.add(r["rank"])
            elif event == "nvrx_timeouts":
                self.extra["nvrx_subsequent_timeout_s"] = r.get("subsequent")
        if self.verdict_at is None:
            self.verdict_at = self._verdict()

    def _new_events(self) -> list[dict[str, Any]]:
        if not self.progress.exists():
            return []
        with open(self.progress, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def _verdict(self) -> float | None:
        tool = self.spec.tool
        if tool in TP_TOOLS:
            assert self.sidecar is not None
            for r in self.sidecar.incidents():
                if r.get("job_id") == self.job_id and r["verdict"] in ("HUNG", "UNRESPONSIVE"):
                    ev = next(iter(r.get("evidence", {}).values()), {})
                    self.extra.update(
                        rule=r["rule"], threshold_s=ev.get("threshold_s", ev.get("timeout_s"))
                    )
                    return float(r["time"])
            return None
        if tool == "nvrx":
            return nvrx_timeout_time(self.log_path)
        return self.first_error

    @property
    def culprit_dead(self) -> bool:
        return self.spec.hang_rank in self.dead_at

    @property
    def all_dead(self) -> bool:
        return len(self.dead_at) == self.spec.ranks

    @property
    def false_kill(self) -> bool:
        """A kill or verdict before the hang (or at all, for a control job)."""
        if self.spec.control:
            clean = len(self.done_ranks) == self.spec.ranks
            return self.verdict_at is not None or (self.all_dead and not clean)
        if self.onset is None:
            return bool(self.dead_at) or self.verdict_at is not None
        early_death = any(t < self.onset for t in self.dead_at.values())
        return early_death or (self.verdict_at is not None and self.verdict_at < self.onset)

    def stop(self) -> None:
        """End whatever is left of this job (only processes this job started)."""
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        if self.workers is not None:
            self.workers.kill()
        if self.launcher is not None:
            if self.launcher.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.launcher.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.launcher.wait(10)

    def result(self) -> dict[str, Any]:
        """This trial's figures, in seconds from onset."""

        def since(t: float | None) -> float | None:
            return None if t is None or self.onset is None else round(t - self.onset, 4)

        return {
            "tool": self.spec.tool,
            "kind": self.spec.kind,
            "control": self.spec.control,
            "hang_rank": self.spec.hang_rank,
            "hang_at": self.spec.hang_at,
            "verdict_s": since(self.verdict_at),
            "culprit_dead_s": since(self.dead_at.get(self.spec.hang_rank)),
            "all_dead_s": since(max(self.dead_at.values())) if self.all_dead else None,
            "first_error_s": since(self.first_error),
            "false_kill": self.false_kill,
            **self.extra,
        }


def nvrx_timeout_time(log_path: Path) -> float | None:
    """Wall time of the first "FT timeout elapsed" line of a rank monitor."""
    if not log_path.exists():
        return None
    for line in log_path.read_text(errors="replace").splitlines():
        m = _NVRX_LINE.match(line)
        if m:
            stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp()  # the launcher logs local time, as this does
    return None
