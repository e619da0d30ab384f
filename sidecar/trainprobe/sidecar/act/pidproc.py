"""One process, held by a pidfd: its /proc facts, and signals only to it.

A pidfd (``pidfd_open``, Linux 5.3) names one process for its whole life, so a
signal sent through it (``pidfd_send_signal``) never reaches a process that
reused the pid. It is opened *before* the process's ``/proc`` facts are read,
and the facts count only if, after the read, the process is still alive (so
the pid still named it when read). Without pidfds (an old kernel) a process is
signalled only while its start time is the one read when it was found.
act/tree.py holds a kill's whole tree this way; a descendant is signalled only
as its worker could signal it (act/creds.py).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from dataclasses import dataclass, field

from trainprobe.sidecar.act.cgroups import frozen
from trainprobe.sidecar.act.creds import Creds, refusal

__all__ = ["Proc", "exited", "held_still", "open_proc", "proc_stat", "stat_fields"]


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


def proc_stat(pid: int) -> tuple[str, int, int, str] | None:
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


def held_still(pid: int) -> str:
    """``"stopped"`` (SIGSTOP, a tracer's stop) or ``"frozen"`` (a cgroup
    freezer) when the kernel holds ``pid`` still, else ``""``. Blocking
    (cgroupfs reads): run it in a worker thread."""
    fields = stat_fields(pid)
    if not fields:
        return ""
    if fields[0] in (b"T", b"t"):
        return "stopped"
    return "frozen" if frozen(pid) else ""


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
    #: The worker whose descendant this is: signalled only as it could be.
    sender: Creds | None = None
    #: A root's own credentials, read once (its descendants are judged by them).
    creds: Creds | None = None
    #: Why it is left alone ("" if not): the worker could not signal it.
    skipped: str = ""

    def alive(self) -> bool:
        """Not exited (a zombie has exited)."""
        if self.fd >= 0:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0)
            except (OSError, ValueError):
                return False
            return not ready  # a pidfd reads ready once its process has exited
        st = proc_stat(self.pid)
        return st is not None and st[2] == self.start_ticks and not exited(self.pid, st[0])

    # Before ``signal``: below it, that name is the method's in annotations.
    def _send(self, sig: signal.Signals) -> bool:
        try:
            if self.fd >= 0:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                st = proc_stat(self.pid)
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

    def signal(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to this very process; False if it is gone or not ours to
        signal, or if the worker could not signal it (then it is left alone)."""
        # Checked again before each signal: a process not yet stopped may change its uids.
        return self.permitted() and self._send(sig)

    def permitted(self) -> bool:
        """Whether the worker could signal it now; if not, it is left alone."""
        if not self.skipped and self.sender is not None:
            why = refusal(self.pid, self.sender)
            if why and self.alive():
                self.leave(why)
        return not self.skipped

    def leave(self, why: str) -> None:
        """Leave it alone from now on; resume it if our SIGSTOP holds it (it
        took its new uid in the instant between our check and that stop)."""
        self.skipped = why
        if "SIGSTOP" in self.signals and "SIGCONT" not in self.signals:
            self._send(signal.SIGCONT)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def record(self) -> dict[str, object]:
        out: dict[str, object] = {
            "pid": self.pid,
            "ppid": self.ppid,
            "name": self.name,
            "signals": list(self.signals),
            "exited": not self.alive(),
            "error": self.error,
        }
        if self.skipped:
            out["reason"] = self.skipped
        return out


def open_proc(pid: int, start_ticks: int | None = None, parent: Proc | None = None) -> Proc | None:
    """Hold ``pid`` if it is the process meant: the one with ``start_ticks``, or
    a live child of ``parent``; None otherwise (gone, reused, re-parented)."""
    fd = _pidfd(pid)
    if fd is None:
        return None
    st = proc_stat(pid)
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
