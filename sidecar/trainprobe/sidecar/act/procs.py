"""Process facts and signals, for workers in this sidecar's PID namespace."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import asdict, dataclass, field


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first),
    or None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if unknown.

    Together with the pid this names one process for its whole life, so a
    kill never hits a process that merely reused the number.
    """
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def proc_stopped(pid: int) -> bool:
    """True if ``pid`` is stopped (SIGSTOP, or a tracer's stop): none of its
    threads runs, so it can neither answer a command nor run a signal handler."""
    fields = _stat_fields(pid)
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
    fields = _stat_fields(pid)
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
    """True if ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat_fields(pid)
    return not fields or fields[0] != b"Z"


#: The wait before SIGKILL for a process that catches SIGTERM. The sidecar
#: signals only processes it judged hung, and there a handler cannot end the
#: process: a main thread stuck in a C call never runs a Python handler, and
#: the frameworks' handlers (Lightning's, transformers' JIT checkpoint) only
#: set a flag for a step boundary that a hung rank never reaches. Waiting out
#: kill_grace_s would only delay the kill.
CAUGHT_SIGTERM_GRACE_S = 0.5


@dataclass
class KillOutcome:
    pid: int
    method: str = "signal"
    signals: list[str] = field(default_factory=list)
    exited: bool = False
    seconds: float = 0.0
    error: str = ""
    #: SIGTERM had a handler, so the wait before SIGKILL was cut to CAUGHT_SIGTERM_GRACE_S.
    sigterm_caught: bool = False

    def to_record(self) -> dict[str, object]:
        return asdict(self)


async def terminate(
    pid: int, grace_s: float, start_ticks: int | None = None, poll_s: float = 0.02
) -> KillOutcome:
    """SIGCONT + SIGTERM, then SIGKILL after ``grace_s``; wait for the exit.

    SIGCONT first so that a stopped process can run its SIGTERM handler.
    Where the kernel says SIGTERM is caught, SIGKILL follows after at most
    CAUGHT_SIGTERM_GRACE_S instead (see there).
    """
    out = KillOutcome(pid=pid)
    t0 = time.monotonic()
    # The last line of defence: callers signal only verified workers, but no
    # caller's mistake may aim this at init, this sidecar or its ancestors.
    protected = protected_pid(pid)
    if protected:
        out.error = f"{protected}; not signalled"
        return out
    if start_ticks is not None and proc_start_ticks(pid) not in (None, start_ticks):
        out.error = "pid was reused by another process; not signalled"
        out.exited = True
        return out
    if not pid_alive(pid):
        out.exited = True
        return out
    out.sigterm_caught = bool(sigterm_caught(pid))
    if out.sigterm_caught:
        grace_s = min(grace_s, CAUGHT_SIGTERM_GRACE_S)
    try:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            os.kill(pid, sig)
            out.signals.append(sig.name)
        if not await wait_gone(pid, grace_s, poll_s):
            os.kill(pid, signal.SIGKILL)
            out.signals.append("SIGKILL")
            await wait_gone(pid, 10.0, poll_s)
    except ProcessLookupError:
        pass
    except PermissionError as err:
        out.error = f"not permitted to signal pid {pid}: {err}"
    out.exited = not pid_alive(pid)
    out.seconds = round(time.monotonic() - t0, 3)
    return out


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
    fields = _stat_fields(pid) if pid > 0 else None
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
