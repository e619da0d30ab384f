"""What a node sidecar sends up its JobSync stream: only what changed.

Under Ray every sidecar uploads all its ranks' summaries at every sync. On a
stream to an upstream (summary mode, ``job_sync_to``) the upstream keeps
what a node sent, and takes silence for "nothing that matters changed". So
while a job is healthy a node sends a rank's summary only when something the
job-level view reads changed: whether it is suspect (:func:`~.digest.is_suspect`),
its verdict, reporting, ending, phases, kernel word or identity; and every
``resend_s`` anyway, so that the digest's steps stay roughly current. While
the node wants the other nodes' ranks (a suspect anywhere, an episode) it
sends every change beyond aging (:func:`~.digest.same_summary`), as under
Ray, at every sync: the analysis then reads fresh steps and sequence
numbers. It also sends the ranks it no longer serves, its episode note
whenever it has one, and an empty upload of each job as a heartbeat when
nothing was sent for ``heartbeat_s``.

Pure: summaries, notes and times in, :class:`Upload` values out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from trainprobe.sidecar.core.job.digest import REPORTING_REFRESH_S, is_suspect, same_summary
from trainprobe.sidecar.core.job.view import EpisodeNote
from trainprobe.sidecar.core.judge.diagnosis import RankSummary

__all__ = ["ASK_AGAIN_S", "HEARTBEAT_S", "Uplink", "Upload", "matters"]

#: A node that had nothing to send for this long sends an empty upload of each
#: job: the upstream forgets a node silent for its stale limit (30 s). A
#: healthy rank's summary goes again this often too.
HEARTBEAT_S = 10.0

#: A node asks for a job's details again after this long without an answer.
ASK_AGAIN_S = 5.0

#: Per job, as JobSync computes it: (ranks here, note, details wanted?, since).
Round = Mapping[str, tuple[Sequence[RankSummary], EpisodeNote | None, bool, tuple[str, int] | None]]


def matters(s: RankSummary) -> tuple[object, ...]:
    """What of ``s`` the job-level view reads while the job is healthy."""
    return (
        is_suspect(s),
        s.verdict,
        s.reporting,
        s.ended,
        s.phases,
        s.kernel,
        s.ft_wait,
        s.world_size,
        s.pid,
        s.host,
        s.node,
        s.replica,
        s.verified,
    )


@dataclass(frozen=True)
class Upload:
    """One job's part of a node's message (see the module docstring)."""

    job_id: str
    ranks: tuple[RankSummary, ...] = ()
    dropped: tuple[int, ...] = ()
    #: ``ranks`` is every rank the node serves (its first upload on a stream).
    full: bool = False
    note: EpisodeNote | None = None
    detail: bool = False
    since: tuple[str, int] | None = None
    #: The node serves no rank of the job any more.
    ended: bool = False
    #: With ``detail``: a large job's verdict and the ranks it names will do.
    bounded: bool = False


class Uplink:
    """What one node sent on its current stream, per job; :meth:`reset` on a new one."""

    def __init__(self, refresh_s: float = REPORTING_REFRESH_S, heartbeat_s: float = HEARTBEAT_S):
        self.refresh_s = refresh_s
        self.heartbeat_s = heartbeat_s
        #: job -> rank -> (summary sent, when).
        self._sent: dict[str, dict[int, tuple[RankSummary, float]]] = {}
        self._notes: dict[str, EpisodeNote | None] = {}
        #: job -> whether its last upload asked for the others' ranks.
        self._detail: dict[str, bool] = {}
        #: job -> when an ask went that no answer has come for yet (:meth:`answered`).
        self._asked: dict[str, float] = {}
        self._last_at = float("-inf")

    def reset(self) -> None:
        """A new stream: the upstream holds nothing of this node."""
        self._sent.clear()
        self._notes.clear()
        self._detail.clear()
        self._asked.clear()
        self._last_at = float("-inf")

    def answered(self, job: str) -> None:
        """An answer about ``job`` came: the next sync may ask again."""
        self._asked.pop(job, None)

    def _changed(
        self,
        sent: tuple[RankSummary, float] | None,
        s: RankSummary,
        detail: bool,
        now: float,
        pushed: bool = False,
    ) -> bool:
        if sent is None:
            return True
        before, at = sent
        if detail and pushed:
            # The upstream ages what it holds and takes a reporting rank not sent
            # again within a heartbeat as still reporting (CoordinatorState.vouched_s):
            # a healthy rank's fresh report every refresh_s would be a message a
            # node every 3 s during an incident (4,000 a second at 12,500 nodes).
            stale = now - at >= self.heartbeat_s
            return stale or not same_summary(before, s, now - at, math.inf)
        if detail:
            return not same_summary(before, s, now - at, self.refresh_s)
        return now - at >= self.heartbeat_s or matters(before) != matters(s)

    def uploads(
        self, round_: Round, now: float, bounded: bool = False, pushed: Collection[str] = ()
    ) -> list[Upload]:
        """What to send for ``round_`` (empty: nothing this time); ``bounded``:
        see :attr:`Upload.bounded`. ``pushed``: jobs whose verdict the node
        holds (a large job, analysed upstream): the upstream pushes each new
        analysis, so asking for details sends only changes and heartbeats,
        not a message every sync (at 12,500 nodes, 25,000 a second)."""
        out: list[Upload] = []
        quiet: list[Upload] = []
        for job, (mine, note, detail, since) in round_.items():
            sent = self._sent.get(job)
            changed: tuple[RankSummary, ...]
            dropped: tuple[int, ...]
            if sent is None:
                changed, dropped, full = tuple(mine), (), True
                sent = self._sent[job] = {}
            else:
                held = job in pushed
                changed = tuple(
                    s for s in mine if self._changed(sent.get(s.rank), s, detail, now, held)
                )
                dropped = tuple(sorted(sent.keys() - {s.rank for s in mine}))
                full = False
            for rank in dropped:
                del sent[rank]
            for s in changed:
                sent[s.rank] = (s, now)
            up = Upload(
                job, changed, dropped, full, note, detail, since if detail else None,
                bounded=bounded and detail,
            )  # fmt: skip
            # One ask at a time: a busy upstream answers late, and a node asking
            # again each sync meanwhile (16,000 messages a second at 12,500 nodes)
            # only made it later. An ask unanswered for ASK_AGAIN_S goes again.
            flip = detail and not self._detail.get(job)
            waits = now - self._asked.get(job, float("-inf")) < ASK_AGAIN_S
            asks = flip or (detail and job not in pushed and not waits)
            if full or changed or dropped or asks or note != self._notes.get(job):
                out.append(up)
                if detail and job not in pushed and (flip or not waits):
                    self._asked[job] = now
            elif self._detail.get(job) and not detail:
                out.append(up)  # details no longer wanted: stop the pushes
            else:
                quiet.append(up)
            self._notes[job], self._detail[job] = note, detail
        for job in sorted(self._sent.keys() - round_.keys()):
            del self._sent[job]
            self._notes.pop(job, None)
            self._detail.pop(job, None)
            self._asked.pop(job, None)
            out.append(Upload(job, ended=True))
        if not out and now - self._last_at >= self.heartbeat_s:
            out = quiet  # a heartbeat: the jobs, nothing new
        if out:
            self._last_at = now
        return out
