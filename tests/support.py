"""Helpers shared by the tests: real sidecar processes and real gloo workers.

Nothing here fakes trainprobe: the sidecar is the real CLI in its own
process, workers are real torch.distributed (gloo) processes on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc

from trainprobe.proto import probe_pb2, probe_pb2_grpc
from trainprobe.sidecar.act.incident_log import read_incident_log

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
DDP_WORKER = REPO / "tests" / "workers" / "ddp_worker.py"
T = TypeVar("T")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse JSON Lines, skipping a line still being written."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def short_tmpdir(prefix: str = "tp-") -> Path:
    """A short directory under /tmp: Unix socket paths must stay < 108 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(
    pred: Callable[[], T], timeout_s: float, interval_s: float = 0.05, what: str = ""
) -> T:
    """Poll ``pred`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or pred}")
        time.sleep(interval_s)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for child processes: this checkout first on the path."""
    env = dict(os.environ)
    roots = [str(REPO / d) for d in ("proto", "hooks", "sidecar")]
    env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def ctl(
    *args: str, timeout: float = 60, check: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """``trainprobe ARGS`` as a user runs it (``env`` added to :func:`child_env`'s);
    ``check``: a failure raises, with its output."""
    return subprocess.run(
        [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", *args],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


class SidecarProcess:
    """``python -m trainprobe.sidecar`` on a private Unix socket."""

    def __init__(
        self,
        workdir: Path,
        *flags: str,
        env: dict[str, str] | None = None,
        cpus: set[int] | None = None,
        wrap: Sequence[str] = (),
    ) -> None:
        self.workdir = workdir
        #: A command the sidecar runs under (e.g. ``unshare ...``).
        self.wrap = list(wrap)
        #: Pin the sidecar (every thread it will start) to these CPUs.
        self.cpus = cpus
        self.socket = workdir / "sidecar.sock"
        self.state_dir = workdir / "state"
        self.log_path = workdir / "sidecar.log"
        self.flags = list(flags)
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"unix://{self.socket}"

    @property
    def incident_log(self) -> Path:
        return self.state_dir / "incidents.jsonl"

    def start(self, timeout_s: float = 30.0) -> SidecarProcess:
        cmd = [
            *self.wrap,
            PYTHON,
            "-m",
            "trainprobe.sidecar",
            "--listen",
            self.target,
            "--state-dir",
            str(self.state_dir),
            *self.flags,
        ]
        offset = len(self.log_text())  # a restart appends to the same log
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(**self.env),
                cwd=self.workdir,
                preexec_fn=(lambda: os.sched_setaffinity(0, self.cpus)) if self.cpus else None,
            )
        wait_for(
            lambda: "ready on" in self.log_text()[offset:] or self.proc.poll() is not None,
            timeout_s,
            what="sidecar start",
        )
        if self.proc.poll() is not None:
            raise RuntimeError(f"sidecar exited {self.proc.returncode}:\n{self.log_text()}")
        return self

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def incidents(self, kind: str = "incident", job: str | None = None) -> list[dict[str, Any]]:
        """The log's records of type ``kind`` (of job ``job`` only, when given)."""
        if not self.incident_log.exists():
            return []
        rows = [r for r in read_incident_log(self.incident_log) if r.get("type") == kind]
        return rows if job is None else [r for r in rows if r.get("job_id") == job]

    def wait_incident(self, pred: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict:
        return wait_for(
            lambda: next((r for r in self.incidents() if pred(r)), None), timeout_s, what="incident"
        )

    def status(self, job_id: str = "") -> probe_pb2.StatusReply:
        with grpc.insecure_channel(self.target) as ch:
            return probe_pb2_grpc.SidecarStub(ch).GetStatus(
                probe_pb2.StatusRequest(job_id=job_id), timeout=5
            )

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> SidecarProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Workers:
    """``n`` gloo ranks of tests/workers/ddp_worker.py (or of ``script``).

    ``rank_env`` adds (or overrides) variables for single ranks, e.g. another
    ``TRAINPROBE_TARGET`` for ranks that report over TCP.
    """

    def __init__(
        self,
        n: int,
        target: str,
        workdir: Path,
        args: Sequence[str] = (),
        job_id: str = "",
        env: dict[str, str] | None = None,
        rank_env: dict[int, dict[str, str]] | None = None,
        script: Path = DDP_WORKER,
        wrap: Sequence[str] = (),
    ) -> None:
        """``wrap`` comes before each rank's command, a launcher that execs it
        (``unshare --time ...``): the pids are then the ranks'."""
        self.n = n
        self.progress = workdir / f"progress-{time.monotonic_ns()}.jsonl"
        port = str(free_port())
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = [workdir / f"rank{r}-{port}.log" for r in range(n)]
        for rank in range(n):
            extra = {
                "RANK": str(rank),
                "WORLD_SIZE": str(n),
                "LOCAL_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "TRAINPROBE_TARGET": target,
                **({"TRAINPROBE_JOB_ID": job_id} if job_id else {}),
                **(env or {}),
                **(rank_env or {}).get(rank, {}),
            }
            e = child_env(**extra)
            with open(self.logs[rank], "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        [*wrap, PYTHON, str(script), "--progress", str(self.progress), *args],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=e,
                    )
                )

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        rows = read_jsonl(self.progress)
        return [r for r in rows if event is None or r.get("event") == event]

    def max_step(self, rank: int | None = None) -> int:
        steps = [r["step"] for r in self.events("step") if rank is None or r["rank"] == rank]
        return max(steps, default=0)

    def wait(self, timeout_s: float) -> list[int | None]:
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
        return [p.poll() for p in self.procs]

    def log_text(self, rank: int) -> str:
        return self.logs[rank].read_text(errors="replace")

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


@contextlib.contextmanager
def sidecar(*flags: str, env: dict[str, str] | None = None) -> Iterator[SidecarProcess]:
    workdir = short_tmpdir()
    proc = SidecarProcess(workdir, *flags, env=env)
    with proc:
        yield proc
