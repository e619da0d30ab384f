"""Process facts and signals, for workers in this sidecar's PID namespace."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import asdict, dataclass, field

from trainprobe.sidecar.act.pidproc import Proc, exited, held_still, open_proc, stat_fields
from trainprobe.sidecar.act.tree import end_procs, stop_descendants, tree_records


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
    #: The process's descendants, ended with it (act/tree.py): pid, ppid, name,
    #: the signals each got, whether it exited.
    children: list[dict[str, object]] = field(default_factory=list)
    #: SIGSTOPped while its descendants were read (so that it forked no more),
    #: before the ``signals`` listed.
    stopped_first: bool = False
    #: Descendants left alone, each with its ``reason``: the worker's own
    #: credentials could not signal them (act/creds.py), so neither does the sidecar.
    skipped: list[dict[str, object]] = field(default_factory=list)
    #: ``SIGKILL``: the kernel held it still (stopped, frozen); never resumed (:func:`terminate`).
    signalled_first: str = ""

    def to_record(self) -> dict[str, object]:
        return asdict(self)


async def terminate(
    pid: int,
    grace_s: float,
    start_ticks: int | None = None,
    poll_s: float = 0.02,
    tree: bool = True,
) -> KillOutcome:
    """SIGTERM (and SIGCONT), then SIGKILL after ``grace_s``; wait for the exit.

    With ``tree`` (the default): SIGSTOP, its descendants found and stopped,
    then SIGTERM and SIGCONT, which resumes it straight into the pending
    SIGTERM (its handler runs, if it has one). Without: SIGCONT, then SIGTERM.
    Where the kernel says SIGTERM is caught, SIGKILL follows after at most
    CAUGHT_SIGTERM_GRACE_S instead (see there). A process the kernel holds still
    (stopped: SIGSTOP, a tracer; frozen by a cgroup freezer) is SIGKILLed at once
    (``signalled_first``): resumed for a SIGTERM handler it would run on from
    where it stopped, and an evicted replica would finish, and commit, the step
    its peers discarded, and heartbeat on to the lighthouse. The descendants are
    found while it lives (act/tree.py) and ended with it; the outcome lists them in
    ``children``, and in ``skipped`` those the worker could not signal itself.
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
    root = await asyncio.to_thread(open_proc, pid, start_ticks)
    if root is None:  # gone (or a zombie) by now, or reused since the check above
        out.exited = True
        return out
    kids: dict[int, Proc] = {}
    terminated = False
    still = ""
    try:
        # Read through the pidfd's process: open_proc checked it is still ours.
        still = await asyncio.to_thread(held_still, pid)
        if tree:
            # Stopped, it forks no more while its tree is read (frozen, neither).
            if not still:
                out.stopped_first = root.signal(signal.SIGSTOP)
                root.signals.clear()
            stopped = still != "frozen"  # a frozen one never reads 'T': no wait for it
            kids = await asyncio.to_thread(stop_descendants, root, None, protected_pid, stopped)
        if still and root.signal(signal.SIGKILL):
            out.signalled_first = signal.SIGKILL.name
        else:
            out.sigterm_caught = bool(sigterm_caught(pid))
            if out.sigterm_caught:
                grace_s = min(grace_s, CAUGHT_SIGTERM_GRACE_S)
            # Stopped by us: SIGTERM waits pending, and SIGCONT resumes it straight
            # into it (no instant to fork in). Otherwise SIGCONT first.
            order = (signal.SIGTERM, signal.SIGCONT) if out.stopped_first else None
            for sig in order or (signal.SIGCONT, signal.SIGTERM):
                root.signal(sig)
        terminated = True
        ending = []
        if kids:
            # Concurrently: a leader's SIGTERM handler may wait for its workers.
            ending.append(asyncio.ensure_future(end_procs(kids.values(), grace_s, poll_s)))
        wait_s = 10.0 if out.signalled_first else grace_s
        if not await _gone(root, wait_s, poll_s) and not out.signalled_first:
            if tree:  # what a SIGTERM handler started meanwhile
                more = await asyncio.to_thread(stop_descendants, root, kids, protected_pid, False)
                late = [p for k, p in more.items() if k not in kids]
                kids.update(more)
                if late:
                    ending.append(asyncio.ensure_future(end_procs(late, 0.0, poll_s)))
            root.signal(signal.SIGKILL)
            await _gone(root, 10.0, poll_s)
        if ending:
            await asyncio.gather(*ending)
        out.signals = list(root.signals)
        out.error = root.error
        out.exited = not root.alive()
        out.children, out.skipped = tree_records(kids)
    finally:
        if not terminated:  # failed or cancelled while its tree was read: undo our stops
            for p in (*([] if still else [root]), *kids.values()):
                p.signal(signal.SIGCONT)
        root.close()
        for p in kids.values():
            p.close()
    out.seconds = round(time.monotonic() - t0, 3)
    return out


async def _gone(proc: Proc, timeout_s: float, poll_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while proc.alive():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


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
