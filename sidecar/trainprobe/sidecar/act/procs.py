"""Process facts from /proc, for workers in this sidecar's PID namespace (the
signals that end one are :mod:`.signals`'s)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from trainprobe.sidecar.act.pidproc import exited, stat_fields

__all__ = [
    "lives",
    "mono_ahead_ns",
    "pid_alive",
    "proc_parent",
    "proc_sample",
    "proc_start_ticks",
    "proc_stopped",
    "protected_pid",
    "sigterm_caught",
    "still_alive",
    "wait_gone",
]


def proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if unknown.

    Together with the pid this names one process for its whole life, so a
    kill never hits a process that merely reused the number.
    """
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def _monotonic_offset_ns(path: str) -> int | None:
    try:
        with open(path, "rb") as fh:
            for line in fh.read(4096).splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == b"monotonic":
                    return int(parts[1]) * 1_000_000_000 + int(parts[2])
    except (OSError, ValueError):
        return None
    return None


def mono_ahead_ns(pid: int) -> int:
    """How far ``pid``'s CLOCK_MONOTONIC runs ahead of this process's: the
    offsets of their time namespaces (``/proc/<pid>/timens_offsets``, as the
    kernel keeps them). 0 where either is unknown (a kernel before 5.6, or
    no such process): both then read the same clock."""
    theirs = _monotonic_offset_ns(f"/proc/{pid}/timens_offsets")
    ours = _monotonic_offset_ns("/proc/self/timens_offsets")
    return 0 if theirs is None or ours is None else theirs - ours


def proc_stopped(pid: int) -> bool:
    """True if ``pid`` is stopped (SIGSTOP, or a tracer's stop): none of its
    threads runs, so it can neither answer a command nor run a signal handler."""
    fields = stat_fields(pid)
    return fields is not None and bool(fields) and fields[0] in (b"T", b"t")


def sigterm_caught(pid: int) -> bool | None:
    """Whether ``pid`` has a handler for SIGTERM (its ``SigCgt`` mask), or None
    if that cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def proc_parent(pid: int) -> int:
    """The parent pid of ``pid`` (0 if unknown)."""
    fields = stat_fields(pid)
    try:
        return int(fields[1]) if fields is not None else 0
    except (IndexError, ValueError):
        return 0


def protected_pid(pid: int) -> str:
    """Why ``pid`` must never be signalled by this sidecar ("" if it may be).

    Whatever a session says: a pid that is not positive (a process group or
    every process), pid 1 (the init of this PID namespace), this sidecar
    itself, or one of its ancestors (its supervisor, its shell).
    """
    if pid <= 1:
        return f"pid {pid} is {'pid 1 (init)' if pid == 1 else 'not a process'}"
    me = os.getpid()
    if pid == me:
        return f"pid {pid} is this sidecar"
    seen = 0
    ancestor = os.getppid()
    while ancestor > 1 and seen < 64:  # bounded: a pid-reuse race cannot loop us
        if ancestor == pid:
            return f"pid {pid} is an ancestor of this sidecar"
        ancestor, seen = proc_parent(ancestor), seen + 1
    return ""


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and has not exited (a zombie has)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return not fields or not exited(pid, fields[0].decode()[:1])


def lives(pid: int, start_ticks: int | None) -> bool:
    """True while the process ``pid`` that started at ``start_ticks`` runs (not a
    zombie, not another process that took the number; an unknown start is taken
    as the same)."""
    return pid_alive(pid) and proc_start_ticks(pid) in (None, start_ticks)


async def wait_gone(pid: int, timeout_s: float, poll_s: float = 0.02) -> bool:
    """Wait until ``pid`` no longer runs; False if it still does after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


async def still_alive(pid: int, settle_s: float = 0.5) -> bool:
    """Whether ``pid`` outlives the stream that just ended.

    A dying process closes its sockets before it becomes a zombie, so the
    stream can end a few ms before the pid looks gone: look again briefly.
    """
    return not await wait_gone(pid, settle_s)


_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_sample(pid: int) -> tuple[str, int, int | None, int | None, int]:
    """(state, utime+stime ticks, rchar, read_bytes, ticks per second) of ``pid``.

    The state is the kernel's letter ("" when the process is gone). Two small
    reads of /proc, never blocking on the process itself: the sidecar calls
    it from a worker thread all the same (``act/evidence.py``).
    """
    fields = stat_fields(pid) if pid > 0 else None
    if not fields:
        return "", 0, None, None, _TICKS_PER_S
    try:
        cpu = int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        cpu = 0
    rchar = read_bytes = None
    try:
        with open(f"/proc/{pid}/io", "rb") as fh:
            for line in fh.read(4096).splitlines():
                name, _, value = line.partition(b":")
                if name == b"rchar":
                    rchar = int(value)
                elif name == b"read_bytes":
                    read_bytes = int(value)
    except (OSError, ValueError):
        pass  # another user's process without ptrace rights: CPU and state only
    return fields[0].decode(errors="replace")[:1], cpu, rchar, read_bytes, _TICKS_PER_S
