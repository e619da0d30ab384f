"""The replica groups of ``trainprobe run``: started, watched, restarted alone, stopped.

A group is ``K`` processes of the user's command with the environment torchrun
and torchft give a replica group's ranks (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` of the group's own store,
``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS``, ``TORCHFT_LIGHTHOUSE``). When
one of its processes fails (an eviction by the sidecar, a crash), the rest of
the group is stopped and the group alone starts again: at once after its
first failure (an evicted group's way back waits for nothing), then, while it
keeps failing within ``reset_s`` of a start, after 1 s, doubled each time,
capped; a group that ran longer than ``reset_s`` starts over at once. A group
that cannot start is never restarted in a tight loop (and the sidecar backs
off its own evictions of one place: core/hang/patience.py). A group whose processes
all exit 0 is done. Every output line is printed with its group and rank in
front (``[replica1:0] ...``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

__all__ = ["Backoff", "ReplicaGroup", "exit_code", "free_port", "pump", "say"]

_OUT_LOCK = threading.Lock()


def say(prefix: str, line: str, out: IO[str] | None = None) -> None:
    """One line with its prefix, whole (lines of several groups never interleave)."""
    stream = out or sys.stdout
    with _OUT_LOCK:
        stream.write(f"{prefix} {line.rstrip()}\n")
        stream.flush()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def exit_code(returncode: int) -> int:
    """A shell's exit status for a child's return code (128 + signal when signalled)."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class Backoff:
    """The delay before a failed group starts again (see the module's doc)."""

    first_s: float = 1.0
    max_s: float = 30.0
    reset_s: float = 60.0
    quick_failures: int = 0

    def after(self, ran_s: float) -> float:
        self.quick_failures = self.quick_failures + 1 if ran_s < self.reset_s else 1
        if self.quick_failures == 1:
            return 0.0
        return float(min(self.max_s, self.first_s * 2 ** (self.quick_failures - 2)))


@dataclass
class ReplicaGroup:
    """One replica group: its processes now, and its history of restarts."""

    index: int
    nproc: int
    command: Sequence[str]
    env: dict[str, str]
    master_addr: str
    backoff: Backoff
    max_restarts: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    restarts: int = 0
    started_at: float = 0.0
    next_start: float | None = 0.0  # monotonic time to start at; None: not to start
    result: int | None = None  # the group's final exit status once done or given up

    @property
    def name(self) -> str:
        return f"replica{self.index}"

    def start(self) -> None:
        port = str(free_port(self.master_addr))  # a fresh store each start: no stale keys
        self.procs = []
        for rank in range(self.nproc):
            env = dict(
                self.env,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(self.nproc),
                LOCAL_WORLD_SIZE=str(self.nproc),
                MASTER_ADDR=self.master_addr,
                MASTER_PORT=port,
                REPLICA_GROUP_ID=str(self.index),
            )
            # Its own session: a Ctrl-C reaches the launcher only, which stops the
            # groups in order (a stopped rank is continued before it is ended).
            p = subprocess.Popen(
                list(self.command),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.procs.append(p)
            threading.Thread(target=pump, args=(p, f"[{self.name}:{rank}]"), daemon=True).start()
        self.started_at = time.monotonic()
        self.next_start = None
        pids = ", ".join(str(p.pid) for p in self.procs)
        say("[trainprobe run]", f"{self.name} started (pids {pids}, restart {self.restarts})")

    def poll(self, now: float, done_by: str = "") -> None:
        """Notice a group that ended or failed; schedule its restart or give it up.
        ``done_by``: a group that finished, so the job's steps are all committed
        and a restart would find no peer to heal from (it would train alone)."""
        if self.result is not None:
            return
        if self.next_start is not None and done_by:
            self.result = 0
            say("[trainprobe run]", f"{done_by} finished every step: {self.name} not restarted")
            return
        if self.next_start is not None:
            if now >= self.next_start:
                self.start()
            return
        codes = [p.poll() for p in self.procs]
        failed = [c for c in codes if c is not None and c != 0]
        if not failed:
            if all(c == 0 for c in codes):
                self.result = 0
                say("[trainprobe run]", f"{self.name} finished")
            return
        code = failed[0]
        self.stop(grace_s=5.0)
        ran = now - self.started_at
        what = f"signal {-code}" if code < 0 else f"status {code}"
        if self.restarts >= self.max_restarts:
            self.result = exit_code(code)
            say(
                "[trainprobe run]",
                f"{self.name} exited ({what}) after {ran:.1f} s; no restarts left "
                f"(--max-restarts {self.max_restarts}): given up",
            )
            return
        if done_by:
            self.result = 0
            say("[trainprobe run]", f"{done_by} finished every step: {self.name} not restarted")
            return
        delay = self.backoff.after(ran)
        self.restarts += 1
        self.next_start = time.monotonic() + delay
        say(
            "[trainprobe run]",
            f"{self.name} exited ({what}) after {ran:.1f} s; restart "
            f"{self.restarts}/{self.max_restarts} in {delay:.1f} s",
        )

    def stop(self, grace_s: float, sig: int = signal.SIGTERM) -> None:
        """End every process of the group: ``sig``, then SIGKILL after ``grace_s``."""
        self.signal(sig)
        self.reap(time.monotonic() + grace_s)

    def signal(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)  # a stopped process cannot handle sig
                    os.kill(p.pid, sig)

    def reap(self, deadline: float) -> None:
        """Wait for the group's processes until ``deadline``, then SIGKILL the rest."""
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait()


def pump(proc: subprocess.Popen[bytes], prefix: str) -> None:
    assert proc.stdout is not None
    for raw in iter(proc.stdout.readline, b""):
        say(prefix, raw.decode(errors="replace"))
    proc.stdout.close()
