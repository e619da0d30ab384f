"""Which of its descendants a worker could signal itself: the kernel's rule.

The sidecar often runs as root, so whatever it signals, the kernel allows. A
tree kill must not lend that power: a worker of an unprivileged user may
start a setuid-root helper that calls ``setresuid(0, 0, 0)`` (as ``sudo``,
``su`` and ``pkexec`` do), and the worker's own ``kill`` on it fails with
EPERM. So each descendant is signalled only if the verified worker could
signal it, by kill(2)'s rule (``kill_ok_by_cred`` in the kernel): the
sender's real or effective uid equals the target's real or saved set-user-id,
or the sender has ``CAP_KILL`` in the target's user namespace.

**Whose credentials.** The worker's, as the kernel shows them in
``/proc/<pid>/status`` at kill time (never a client's word), read while the
process is held by a pidfd; the tree kill reads them once the worker is
stopped, so they cannot change under it.

**A worker with CAP_KILL** (root, normally) may signal any process of its own
user namespace, so its descendants there are all ended, as it could end them
itself. Only the same user namespace counts (its inode in
``/proc/<pid>/ns/user``): one the worker merely owns, or one that cannot be
read, falls back to the uid rule, which errs towards leaving a process alone.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

__all__ = ["CAP_KILL", "Creds", "may_signal", "read_creds", "refusal"]

#: The capability bit that lets a process signal any other (linux/capability.h).
CAP_KILL = 5


@dataclass(frozen=True)
class Creds:
    """A process's uids and its right to signal anyone, as ``/proc`` says."""

    ruid: int
    euid: int
    suid: int
    cap_kill: bool
    #: Inode of its user namespace; 0 if unknown.
    userns: int = 0


def read_creds(pid: int, userns: bool = True) -> Creds | None:
    """``pid``'s credentials from ``/proc/<pid>/status``, or None if unreadable;
    its user namespace too if ``userns`` (else 0: unknown).

    The caller holds the process by a pidfd and checks it still lives after
    this read, so that the pid still named it.
    """
    uids: list[int] = []
    cap_eff = -1
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh.read(16384).splitlines():
                if line.startswith(b"Uid:"):
                    uids = [int(x) for x in line.split()[1:4]]
                elif line.startswith(b"CapEff:"):
                    cap_eff = int(line.split()[1], 16)
                    break  # after the Uid line; nothing further is needed
    except (OSError, ValueError, IndexError):
        return None
    if len(uids) != 3 or cap_eff < 0:
        return None
    ns = 0
    if userns:
        with contextlib.suppress(OSError):
            ns = os.stat(f"/proc/{pid}/ns/user").st_ino
    return Creds(uids[0], uids[1], uids[2], bool(cap_eff >> CAP_KILL & 1), ns)


def may_signal(sender: Creds, target: Creds) -> str:
    """ "" if the kernel would let ``sender`` signal ``target``; else why not."""
    if sender.cap_kill and sender.userns and sender.userns == target.userns:
        return ""
    if {sender.ruid, sender.euid} & {target.ruid, target.suid}:
        return ""
    return (
        f"real uid {target.ruid}, saved {target.suid}; the worker's real uid {sender.ruid}, "
        f"effective {sender.euid}: no uid in common and no CAP_KILL, so the worker "
        "could not signal it itself (kill(2))"
    )


def refusal(pid: int, sender: Creds) -> str:
    """Why ``sender`` may not signal ``pid`` now ("" if it may)."""
    # The target's namespace matters only to a sender with CAP_KILL.
    target = read_creds(pid, userns=sender.cap_kill)
    if target is None:
        return "its credentials could not be read"
    return may_signal(sender, target)
