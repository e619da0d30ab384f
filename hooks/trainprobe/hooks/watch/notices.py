"""What the sidecar told this process about a peer it killed.

When trainprobe kills a hung rank, the job's other ranks fail next, in a
collective whose peer is gone ("Connection closed by peer"), and their
traceback passes through trainprobe's comm hook. The sidecar therefore tells
them first (a ``Notice`` command): this module logs it once, from the
reporter thread, and keeps it so that such an error can carry a note that
names the kill, its reason and the incident id.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("trainprobe.hooks")

__all__ = ["KillNotice", "explain", "latest", "latest_line", "receive", "receive_pb"]

#: A notice explains errors for this long after it came (the peers' errors
#: follow the kill within seconds; gloo's own timeout is at most minutes).
RELEVANT_S = 600.0
#: Bounds what a sidecar can make this process log or attach.
_MAX_TEXT = 500


class KillNotice:
    __slots__ = ("incident_id", "job_id", "killed_ranks", "line", "received_mono")

    def __init__(
        self,
        incident_id: str,
        job_id: str,
        killed_ranks: list[int],
        verdict: str,
        rule: str,
        reason: str,
        evicted_replica: str = "",
        replicas_left: int = 0,
    ) -> None:
        self.incident_id = incident_id[:64]
        self.job_id = job_id[:128]
        self.killed_ranks = killed_ranks[:64]
        self.received_mono = time.monotonic()
        ranks = ", ".join(str(r) for r in self.killed_ranks) or "?"
        which = "ranks" if len(self.killed_ranks) > 1 else "rank"
        why = f"{verdict} ({rule})" if rule else verdict
        text = f"trainprobe killed {which} {ranks} of job {self.job_id}: {why}"
        if evicted_replica:
            left = "replica goes" if replicas_left == 1 else "replicas go"
            text = (
                f"trainprobe evicted replica {evicted_replica[:128]} ({which} {ranks}) of job "
                f"{self.job_id}; {replicas_left} {left} on: {why}"
            )
        if reason:
            text += f": {reason}"
        self.line = f"{text[:_MAX_TEXT]} [incident {self.incident_id}]"


_lock = threading.Lock()
_latest: KillNotice | None = None


def receive(notice: KillNotice) -> None:
    """Keep ``notice`` and log it (called on the reporter thread)."""
    global _latest
    with _lock:
        _latest = notice
    log.warning("%s; collectives with that rank will now fail on this rank", notice.line)


def receive_pb(n: Any) -> None:
    """:func:`receive` a ``probe_pb2.Notice``."""
    receive(
        KillNotice(
            n.incident_id,
            n.job_id,
            list(n.killed_ranks),
            n.verdict,
            n.rule,
            n.reason,
            getattr(n, "evicted_replica", ""),
            getattr(n, "replicas_left", 0),
        )
    )


def latest_line() -> str:
    """The last notice's line, or a generic one."""
    notice = _latest
    return notice.line if notice is not None else "trainprobe evicted a replica"


def latest() -> KillNotice | None:
    """The last notice, if it is recent enough to explain an error."""
    notice = _latest
    if notice is None or time.monotonic() - notice.received_mono > RELEVANT_S:
        return None
    return notice


def explain(err: BaseException) -> BaseException:
    """Note on ``err`` (a failed collective) the kill that caused it, if any.

    Never raises: it runs on the error path of the training thread.
    """
    try:
        notice = latest()
        if notice is not None and isinstance(err, Exception):
            note = f"{notice.line}; this error follows from that kill, not from a trainprobe fault"
            add_note = getattr(err, "add_note", None)  # Python 3.11+
            if add_note is not None and note not in getattr(err, "__notes__", ()):
                add_note(note)
    except Exception:
        pass
    return err
