"""A culprit's process tree: found from /proc, signalled only through pidfds.

A rank killed alone leaves its children behind (a DataLoader worker, a compile
worker, a user's subprocess), re-parented to init; on a GPU each holds its CUDA
context and memory. So a kill ends the verified process's descendants too.

**How they are found.** One pass over ``/proc/*/stat`` gives every process's
parent (``/proc/<pid>/task/<tid>/children`` needs ``CONFIG_PROC_CHILDREN`` and is
per thread, so it is not relied on). The tree is read from the verified root
downwards, while the root is still alive: once a parent dies its children are
re-parented and no longer name it. The root, then each process found, is
stopped (SIGSTOP) before its own children are looked for, and passes repeat until one finds
nobody new (at most :data:`MAX_PASSES`), so a process forking while we look is
caught: a stopped process forks no more, and its last child is in the next pass.

**Why a recycled pid is never signalled.** Every process is held by a pidfd
(``pidfd_open``, Linux 5.3) and signalled through it (``pidfd_send_signal``): a
pidfd names one process for its whole life. It is opened *before* the process's
``/proc`` facts are read, and the facts count only if, after the read, the
pidfd's process is still alive (so the pid still named it when read) and so is
the parent it names, itself held by a pidfd (so that parent pid named our
process). A child is then truly a child of the verified root, or of one of its
verified descendants. Without pidfds (an old kernel) a process is signalled only
if its start time is still the one read when it was found, the check the root
always had.

**What is not found.** A process that left the tree before the kill (a
daemon's double fork whose middle process already exited: its parent is init
now), and a child the root forks in the microseconds between the SIGCONT that
resumes it and the SIGTERM (a hung root rarely forks). Bounded: :data:`MAX_TREE` processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "MAX_PASSES",
    "MAX_TREE",
    "Proc",
    "end_procs",
    "exited",
    "open_proc",
    "stat_fields",
    "stop_descendants",
]

#: Most descendants one kill ends (a DataLoader has a few workers, each a few threads).
MAX_TREE = 512
#: Passes over /proc looking for new descendants; each finds the next generation
#: (or what a process not yet stopped forked meanwhile).
MAX_PASSES = 16
#: How long a SIGSTOPped process is given to stop before its children are read.
STOP_WAIT_S = 0.2
#: The most one tree read waits for stops in all (a loaded machine may take
#: long to run a process into its stop; the kill is not held up past this).
STOP_BUDGET_S = 0.5


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first),
    or None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def _stat(pid: int) -> tuple[str, int, int, str] | None:
    """(state, ppid, start ticks, command name) of ``pid``, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    name = raw[raw.find(b"(") + 1 : raw.rfind(b")")].decode(errors="replace")[:64]
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode()[:1], int(fields[1]), int(fields[19]), name
    except (IndexError, ValueError):
        return None


def exited(pid: int, state: str) -> bool:
    """Whether a process whose /proc state reads ``state`` has exited.

    A leader reads ``Z`` once its own thread ended, while its other threads may
    run on for long (a main thread that called ``pthread_exit``), or for the
    moment a SIGKILL takes to tear them down; the process ends with its last
    thread, so look for one.
    """
    if state not in ("Z", "X"):
        return False
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def _pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``; -1 where the kernel has none; None if ``pid`` is gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (OSError, AttributeError):
        return -1


@dataclass
class Proc:
    """One process of a tree, held by a pidfd (``fd`` -1: by its start time)."""

    pid: int
    ppid: int
    start_ticks: int
    name: str
    fd: int = -1
    signals: list[str] = field(default_factory=list)
    error: str = ""

    def alive(self) -> bool:
        """Not exited (a zombie has exited)."""
        if self.fd >= 0:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0)
            except (OSError, ValueError):
                return False
            return not ready  # a pidfd reads ready once its process has exited
        st = _stat(self.pid)
        return st is not None and st[2] == self.start_ticks and not exited(self.pid, st[0])

    def signal(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to this very process; False if it is gone or not ours to signal."""
        try:
            if self.fd >= 0:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                st = _stat(self.pid)
                if st is None or st[2] != self.start_ticks:
                    return False
                os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError as err:
            self.error = f"not permitted to signal pid {self.pid}: {err}"
            return False
        self.signals.append(sig.name)
        return True

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def record(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "name": self.name,
            "signals": list(self.signals),
            "exited": not self.alive(),
            "error": self.error,
        }


def open_proc(pid: int, start_ticks: int | None = None, parent: Proc | None = None) -> Proc | None:
    """Hold ``pid`` if it is the process meant: the one with ``start_ticks``, or
    a live child of ``parent``; None otherwise (gone, reused, re-parented)."""
    fd = _pidfd(pid)
    if fd is None:
        return None
    st = _stat(pid)
    proc = Proc(pid, st[1], st[2], st[3], fd) if st is not None else None
    ok = (
        proc is not None
        and st is not None
        and not exited(pid, st[0])
        and (start_ticks is None or st[2] == start_ticks)
        and (parent is None or (st[1] == parent.pid and st[2] >= parent.start_ticks))
        # Read while both lived: the pid was this process, its ppid that parent.
        and proc.alive()
        and (parent is None or parent.alive())
    )
    if not ok:
        if proc is not None:
            proc.close()
        elif fd >= 0:
            os.close(fd)
        return None
    return proc


def _children_by_parent() -> dict[int, list[int]]:
    """ppid -> pids, one pass over /proc."""
    out: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None and not exited(int(name), st[0]):
            out.setdefault(st[1], []).append(int(name))
    return out


def _stopped(p: Proc) -> bool:
    """Stopped (forks no more) or gone."""
    st = _stat(p.pid)
    return st is None or st[0] in ("T", "t") or not p.alive()


def _wait_stopped(procs: Iterable[Proc], timeout_s: float = STOP_WAIT_S) -> list[Proc]:
    """Wait for SIGSTOPs to take; the processes not stopped yet."""
    pending = [p for p in procs if not _stopped(p)]
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        time.sleep(0.005)
        pending = [p for p in pending if not _stopped(p)]
    return pending


def stop_descendants(
    root: Proc,
    known: dict[int, Proc] | None = None,
    skip: Callable[[int], str] | None = None,
    root_stopped: bool = True,
) -> dict[int, Proc]:
    """Every descendant of ``root`` (held, stopped), ``known`` ones included.

    Blocking (passes over /proc): run it in a worker thread. ``skip(pid)``
    names a pid never to touch (this sidecar, its ancestors). The caller
    stops ``root`` first (SIGSTOP): a root that runs may fork after the last pass.
    Passes go on until one finds nobody new *and* every process seen has
    stopped (a loaded machine may take a while to run a process into its
    stop; until then it may still fork), at most :data:`MAX_PASSES`, and
    waiting for stops at most :data:`STOP_BUDGET_S` in all.
    ``root_stopped=False``: the root runs (a last look just before its SIGKILL).
    """
    members = dict(known or {})
    deadline = time.monotonic() + STOP_BUDGET_S
    unstopped = _wait_stopped([root, *members.values()] if root_stopped else members.values())
    for _ in range(MAX_PASSES):
        parents = {root.pid: root, **members}
        new: list[Proc] = []
        for ppid, pids in _children_by_parent().items():
            parent = parents.get(ppid)
            if parent is None:
                continue
            for pid in pids:
                if pid in members or len(members) >= MAX_TREE or (skip and skip(pid)):
                    continue
                proc = open_proc(pid, parent=parent)
                if proc is not None:
                    proc.signal(signal.SIGSTOP)
                    members[pid] = proc
                    new.append(proc)
        left = deadline - time.monotonic()
        if not new and (not unstopped or left <= 0):
            break
        unstopped = _wait_stopped([*unstopped, *new], max(0.0, min(STOP_WAIT_S, left)))
    return members


async def end_procs(procs: Iterable[Proc], grace_s: float, poll_s: float = 0.02) -> None:
    """SIGTERM then SIGCONT each (stopped ones run straight into it), SIGKILL
    what is left after ``grace_s``, and wait (at most 10 s) until all are gone."""
    procs = [p for p in procs if p.alive()]
    for p in procs:
        if p.signal(signal.SIGTERM):
            p.signal(signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    while any(p.alive() for p in procs) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
    for p in procs:
        if p.alive():
            p.signal(signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while any(p.alive() for p in procs) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
