"""The session rule: when a Hello resumes a session, takes a rank, or is refused.

A rank is reported by one process at a time, and only the kernel's word
(an identity ticket, here or on the relay node that vouched for it) makes a
process the same one again; a pid and a host are public. So
(docs/SECURITY.md):

- A Hello resumes a session only as the same process (:func:`same_process`):
  both verified with the same pid and start time (and, while the session is
  live, through the same relay stream), or both unverified with the same
  pid, host and non-empty session secret.
- A live verified session is never taken: its silence is a verdict to reach
  (UNRESPONSIVE, then its kill), not a vacancy.
- A live unverified one goes to a verified newcomer at once, and to an
  unverified one once it has been silent for a heartbeat (:func:`takes_over`).
- Anything else is refused with ALREADY_EXISTS (:func:`held_by` says by
  whom). An ended session a newcomer does not resume is replaced by a fresh
  one: no history of another process carries over.
- A job belongs to the uid of its live verified ranks: a verified process of
  another uid (on the same kernel) is refused it with PERMISSION_DENIED
  (:func:`other_uid`). ``--socket-access group``/``all`` let other users'
  processes in, each for its own pid; one that joined a job of another uid
  would change how that job's ranks are judged (its running rank made a
  whole job's stop a kill of ranks it could never signal itself).

These are predicates over plain data; :class:`~trainprobe.sidecar.core.session.registry.Registry`,
the one writer of sessions, applies them.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from trainprobe.sidecar.core.session.model import (
    HelloData,
    VerifiedProcess,
    WorkerState,
    heard_every_ms,
)
from trainprobe.sidecar.core.text import printable

__all__ = ["held_by", "other_uid", "same_process", "takes_over"]


def takes_over(
    old: WorkerState, verified: VerifiedProcess | None, now: float, takeover_after_s: float
) -> bool:
    """Whether a newcomer (``verified`` or not) takes the rank of live session ``old``.

    A silent holder keeps its rank for its heartbeat limit: ``takeover_after_s``,
    or three of its report intervals when longer.
    """
    silent_s = now - old.last_report_at
    holds_s = max(takeover_after_s, 3 * heard_every_ms(old) / 1000.0)
    return not old.verified and (verified is not None or silent_s > holds_s)


def held_by(old: WorkerState, hello: HelloData, node: object | None) -> str:
    """Why ``hello`` is refused the rank that live session ``old`` holds."""
    return (
        f"rank {hello.rank} of job {hello.job_id!r} is already reported by "
        f"{'verified ' if old.verified else ''}pid {old.hello.pid} on "
        f"{printable(old.hello.host)}"  # another client's word, logged by this one's hook
        f"{' through another relay stream' if old.node not in (None, node) else ''}"
        "; set RANK/TRAINPROBE_JOB_ID or pass rank=/job_id= to "
        "LivenessProbeHook"
    )


def other_uid(
    workers: Iterable[WorkerState],
    hello: HelloData,
    verified: VerifiedProcess | None,
    node: object | None,
) -> str:
    """Why a verified ``hello`` may not join its job ("" if it may): a live
    verified rank of that job, vouched for by the same kernel (``node``: None
    here, else the relay stream), belongs to another uid. Unverified sessions
    name no uid and bind no job."""
    if verified is None:
        return ""
    for w in workers:
        if (
            w.connected
            and w.verified
            and w.node is node
            and w.uid != verified.uid
            and w.hello.job_id == hello.job_id
        ):
            return (
                f"job {hello.job_id!r} belongs to uid {w.uid} (rank {w.hello.rank}, "
                f"verified pid {w.hello.pid}); a process of uid {verified.uid} cannot "
                "join it: set TRAINPROBE_JOB_ID or pass job_id= to LivenessProbeHook"
            )
    return ""


def same_process(
    old: WorkerState, hello: HelloData, verified: VerifiedProcess | None, node: object | None
) -> bool:
    """Whether a Hello comes from the process that holds ``old``.

    Verified on either side: only the kernel's word counts (pid and start
    time), and a live session's relay stream owns it. Neither verified: the
    same pid and host and the session secret that only that hook has sent
    (an older hook sends none: its reconnect is a new session).
    """
    if verified is not None or old.verified:
        return (
            verified is not None
            and old.verified
            and verified.pid == old.hello.pid
            and verified.start_ticks == old.proc_start_ticks
            and (old.node is node or not old.connected)
        )
    secret = hello.session_secret
    return (
        bool(secret)
        and hmac.compare_digest(secret, old.hello.session_secret)
        and old.hello.pid == hello.pid
        and old.hello.host == hello.host
    )
