"""Ending one verified worker process, and its descendants, with signals.

:func:`terminate` is the one place the sidecar sends SIGTERM and SIGKILL to
a worker (the signal killer, the relay node's kill orders, Ray's fallback);
the facts it checks first (start time, protected pids, a caught SIGTERM) are
:mod:`.procs`'s, the descendants' handling :mod:`.tree`'s.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import asdict, dataclass, field

from trainprobe.sidecar.act.pidproc import Proc, held_still, open_proc
from trainprobe.sidecar.act.procs import proc_start_ticks, protected_pid, sigterm_caught
from trainprobe.sidecar.act.tree import end_procs, stop_descendants, tree_records

__all__ = ["CAUGHT_SIGTERM_GRACE_S", "KillOutcome", "terminate"]


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
