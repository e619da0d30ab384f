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

**Only what the worker could signal itself.** The sidecar is often root, the
worker not: each descendant is checked against kill(2)'s rule with the
worker's own credentials (act/creds.py) before every signal. One the worker
could not signal (a setuid-root helper that called ``setresuid(0, 0, 0)``) is
left alone and listed, with why; its own descendants are not looked for.

**What is not found.** A process that left the tree before the kill (a
daemon's double fork whose middle process already exited: its parent is init
now), and a child the root forks in the microseconds between the SIGCONT that
resumes it and the SIGTERM (a hung root rarely forks). Bounded: :data:`MAX_TREE` processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterable

from trainprobe.sidecar.act.creds import read_creds
from trainprobe.sidecar.act.pidproc import Proc, exited, open_proc, proc_stat

__all__ = [
    "MAX_PASSES",
    "MAX_TREE",
    "end_procs",
    "stop_descendants",
    "tree_records",
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
        st = proc_stat(int(name))
        if st is not None and not exited(int(name), st[0]):
            out.setdefault(st[1], []).append(int(name))
    return out


def _stopped(p: Proc) -> bool:
    """Stopped (forks no more) or gone."""
    st = proc_stat(p.pid)
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
    A descendant the root could not signal itself is held but left alone
    (``skipped`` says why; act/creds.py), and its descendants are not looked for.
    """
    members = dict(known or {})
    deadline = time.monotonic() + STOP_BUDGET_S
    held = [p for p in members.values() if not p.skipped]
    unstopped = _wait_stopped([root, *held] if root_stopped else held)
    # The worker's right to signal, read once, while it is stopped (if the
    # caller stopped it); a later look reuses it, whatever it exec'd since.
    if root.creds is None:
        root.creds = read_creds(root.pid)
        if not root.alive():
            return members
    sender = root.creds
    for _ in range(MAX_PASSES):
        parents = {root.pid: root, **{k: p for k, p in members.items() if not p.skipped}}
        new: list[Proc] = []
        for ppid, pids in _children_by_parent().items():
            parent = parents.get(ppid)
            if parent is None:
                continue
            for pid in pids:
                if pid in members or len(members) >= MAX_TREE or (skip and skip(pid)):
                    continue
                proc = open_proc(pid, parent=parent)
                if proc is None:
                    continue
                proc.sender = sender
                if sender is None:
                    proc.skipped = "the worker's credentials could not be read"
                members[pid] = proc
                if proc.signal(signal.SIGSTOP) or not proc.skipped:
                    new.append(proc)
        left = deadline - time.monotonic()
        if not new and (not unstopped or left <= 0):
            break
        unstopped = _wait_stopped([*unstopped, *new], max(0.0, min(STOP_WAIT_S, left)))
        # Stopped now, their uids hold still: one that changed them between our
        # check and its stop is resumed and left alone before its children are read.
        for p in new:
            p.permitted()
        unstopped = [p for p in unstopped if not p.skipped]
    return members


def tree_records(procs: dict[int, Proc]) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The action record's ``children`` (ended) and ``skipped`` (left alone), by pid."""
    recs = [(procs[k].skipped, procs[k].record()) for k in sorted(procs)]
    return [r for s, r in recs if not s], [r for s, r in recs if s]


def _signal_each(procs: Iterable[Proc], first: signal.Signals, *then: signal.Signals) -> None:
    """``first`` to each, and ``then`` to each that took it."""
    for p in procs:
        if p.signal(first):
            for sig in then:
                p.signal(sig)


async def end_procs(procs: Iterable[Proc], grace_s: float, poll_s: float = 0.02) -> None:
    """SIGTERM then SIGCONT each (stopped ones run straight into it), SIGKILL
    what is left after ``grace_s``, and wait (at most 10 s) until all are gone."""
    procs = [p for p in procs if not p.skipped and p.alive()]
    # In a worker thread: before each signal the target's uids are read
    # (act/creds.py), ~0.1 ms each, too long for the event loop at 512 processes.
    await asyncio.to_thread(_signal_each, procs, signal.SIGTERM, signal.SIGCONT)
    procs = [p for p in procs if not p.skipped]
    deadline = time.monotonic() + grace_s
    while any(p.alive() for p in procs) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
    await asyncio.to_thread(_signal_each, [p for p in procs if p.alive()], signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while any(p.alive() for p in procs if not p.skipped) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
