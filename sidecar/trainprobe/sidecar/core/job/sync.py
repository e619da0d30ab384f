"""What a job's coordinator keeps and answers: :class:`CoordinatorState`.

Every sidecar of a job calls :meth:`CoordinatorState.sync` with its ranks'
summaries and its episode note (on Ray through the job's coordinator actor,
:mod:`~trainprobe.sidecar.ray.coordinator`), and gets a :class:`SyncReply`:

- without ``detail``, the job's bounded digest (:mod:`.digest`);
- with ``detail``, the other sidecars' ranks: all of them, or those changed
  since a version (:mod:`.store`);
- with ``detail`` and ``bounded``, the same while the others' ranks fit in
  :data:`~.verdict.MAX_SENT`; past that, the coordinator's own analysis of the
  whole job (a :class:`~.verdict.JobVerdict`) and at most MAX_SENT summaries
  (:func:`~.verdict.exemplars`), so that what a sidecar receives during an
  incident does not grow with the nodes either.

``now`` is the coordinator's own monotonic clock; ages in replies are
measured on it.
"""

from __future__ import annotations

import gc
from collections import OrderedDict, deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from trainprobe.sidecar.core.job.digest import REPORTING_REFRESH_S, JobDigest
from trainprobe.sidecar.core.job.store import RankStore
from trainprobe.sidecar.core.job.verdict import (
    SETTLED_EVERY_S,
    JobAnalysis,
    JobVerdict,
    aged,
    analyse_every_s,
    judge_job,
    too_large_to_send,
)
from trainprobe.sidecar.core.judge.diagnosis import RankSummary
from trainprobe.sidecar.core.limits import MAX_NOTE_RANKS

__all__ = ["CoordinatorState", "EpisodeNote", "SyncReply"]

#: An upload this recent is the rank as it is now (a sync or two ago).
_FRESH_S = 1.0
#: Closed notes kept for the upstream's telemetry to take (per job).
_CLOSED_KEPT = 4
#: Replies kept built for one analysis (the common one first).
_REPLIES_KEPT = 64


@dataclass(frozen=True)
class EpisodeNote:
    """A job's open hang episode, as the sidecar that opened it announces it."""

    id: str
    job_id: str
    opened_by: str
    verdict: str
    rule: str
    kind: str = ""
    culprits: tuple[int, ...] = ()
    text: str = ""
    #: Where culprits are stuck, as their own sidecars found out (rank -> place).
    where: dict[int, str] = field(default_factory=dict)
    #: Sent once by its opener for an episode that opened and closed between
    #: two of its syncs: for the record (the upstream's trace), never an open
    #: episode; to the coordinator it means what no note means.
    closed: bool = False


@dataclass(frozen=True)
class SyncReply:
    """The coordinator's answer to one sidecar: the others' ranks (or a digest), the episode.

    A sidecar that asked for no detail gets ``detail=False``, no ranks and the
    digest; one that asked for the changes since a version gets them
    (``full=False``) and ``gone``, the ranks to drop; otherwise every other rank.
    A ``bounded`` ask of a job too large to send whole gets ``verdict`` (the
    coordinator's analysis) and, in ``others``, only the ranks it names
    (``full=True``, ``since=None``).
    """

    #: (summary, seconds since the coordinator received it) of other sidecars' ranks.
    others: tuple[tuple[RankSummary, float], ...] = ()
    episode: EpisodeNote | None = None
    digest: JobDigest | None = None
    detail: bool = True
    full: bool = True
    gone: tuple[int, ...] = ()
    #: What to ask the next delta since: (the store's instance, its version).
    since: tuple[str, int] | None = None
    #: The whole job's analysis, when ``others`` are only the ranks it names.
    verdict: JobVerdict | None = None


@dataclass
class _Shared:
    """One analysis's answers, as every sidecar gets them."""

    analysis: JobAnalysis
    episode: EpisodeNote | None
    others: tuple[tuple[RankSummary, float], ...]
    digest: JobDigest
    #: id(verdict) -> the reply carrying it.
    replies: dict[int, SyncReply] = field(default_factory=dict)


class CoordinatorState:
    """The coordinator's memory for one job: its ranks (:class:`RankStore`), and the episode.

    A sidecar silent for ``stale_after_s`` is forgotten with its ranks, and so
    is an episode whose opener is.
    """

    def __init__(
        self, stale_after_s: float = 30.0, instance: str = "", vouched_s: float = 0.0
    ) -> None:
        self.stale_after_s = stale_after_s
        #: How long past its heartbeat limit a sidecar's silence about a reporting
        #: rank still means "nothing changed" (summary mode: a node sends a
        #: healthy rank again only every heartbeat, Uplink).
        self.vouched_s = vouched_s
        self.store = RankStore(instance)
        #: Each sidecar's last sync, the least recent first.
        #: (An OrderedDict: a plain dict's first item, after a pop and insert per
        #: sync, is found past every deleted slot: 8 us a sync at 12,500 nodes.)
        self._seen: OrderedDict[str, float] = OrderedDict()
        self.episode: EpisodeNote | None = None
        #: Closed notes of episodes never held open here, the newest last
        #: (the upstream's telemetry takes them).
        self.closed: deque[EpisodeNote] = deque(maxlen=_CLOSED_KEPT)
        self.last_sync_at = 0.0
        #: The last analysis of the whole job (bounded answers), and how many ran.
        self.analysis: JobAnalysis | None = None
        self.analyses = 0
        #: The heartbeat refresh of the last bounded ask, and each sidecar's own
        #: (its ranks age by it: another's must not make them look silent).
        self.refresh = REPORTING_REFRESH_S
        self._refreshes: dict[str, float] = {}
        #: The store's change count the last analysis read.
        self._analysed_changes = -1
        #: The replies of the last analysis (built once for every sidecar).
        self._sent: _Shared | None = None

    def sync(
        self,
        sidecar_id: str,
        summaries: Sequence[RankSummary],
        note: EpisodeNote | None,
        now: float,
        detail: bool = True,
        since: tuple[str, int] | None = None,
        refresh: float = REPORTING_REFRESH_S,
        bounded: bool = False,
        taken: Sequence[float] | None = None,
    ) -> SyncReply:
        """Store ``sidecar_id``'s ranks and episode note; answer with the episode, and
        the others' ranks (all, or those changed ``since``) or, without ``detail``,
        the job's digest. ``refresh``: :func:`~.digest.refresh_s` of the
        sidecar's heartbeat limit. ``bounded``: past MAX_SENT other ranks,
        the job's verdict and the ranks it names instead (the module docstring)."""
        self.last_sync_at = now
        self._seen[sidecar_id] = now
        self._seen.move_to_end(sidecar_id)
        while self._seen:  # least recent first: stop at a fresh one (no pass over all)
            sid, t = next(iter(self._seen.items()))
            if now - t <= self.stale_after_s:
                break
            del self._seen[sid]
            self._refreshes.pop(sid, None)
            self.store.forget(sid)
        self._refreshes[sidecar_id] = refresh
        store = self.store
        store.upload(sidecar_id, summaries, now, refresh, taken)
        self.episode = ep = self._episode(sidecar_id, note)
        digest = store.digest(now)
        upto = (store.instance, store.version)
        if not detail:
            return SyncReply((), ep, digest, detail=False, full=False)
        mine = store.owned(sidecar_id)
        if bounded and too_large_to_send(len(store), len(mine)):
            self.refresh = refresh
            return self.pushed(self._analyse(now, refresh), mine, now)
        if since is None or since[0] != store.instance or since[1] > store.version:
            return SyncReply(store.full(sidecar_id, now), ep, digest, since=upto)
        others, gone = store.delta(sidecar_id, since[1], now)
        return SyncReply(others, ep, digest, full=False, gone=gone, since=upto)

    def reanalyse(self, now: float) -> JobAnalysis | None:
        """A new analysis for the sidecars that hold the last one and no longer
        ask (summary mode pushes it to them), or None while that one stands
        (:meth:`_due`)."""
        return self._analyse(now, self.refresh) if self._due(now) else None

    def _due(self, now: float) -> bool:
        """Whether the job's last analysis is to be run again: at most every
        :func:`~.verdict.analyse_every_s` (ANALYZE_EVERY_S, longer for a large
        job); while no rank changed what it is doing since one that settled
        the question, only every SETTLED_EVERY_S (a pass over 100,000 ranks
        costs about half a second of one core)."""
        a = self.analysis
        if a is None:
            return True
        every = analyse_every_s(len(self.store))
        unchanged = self._analysed_changes == self.store.changes and a.settled()
        return now - a.at >= (max(SETTLED_EVERY_S, every) if unchanged else every)

    def pushed(self, a: JobAnalysis, mine: Collection[int], now: float) -> SyncReply:
        """What analysis ``a`` tells the sidecar that owns ``mine``: its verdict
        (:meth:`~.verdict.JobAnalysis.pushed`) and the ranks it names, its own
        among them (it reads its own from its sessions). Every sidecar whose
        ranks need no naming of their own gets the same reply object, so the
        upstream encodes it once for all of them."""
        held = self._sent
        if held is None or held.analysis is not a or held.episode is not self.episode:
            others = self.store.these(a.exemplars, "", now)
            held = self._sent = _Shared(a, self.episode, others, self.store.digest(now))
        v = a.pushed(mine)
        reply = held.replies.get(id(v))
        if reply is None or reply.verdict is not v:
            reply = SyncReply(held.others, held.episode, held.digest, verdict=v)
            # A verdict naming a node's own ranks is built at each ask: kept
            # past a few, one node asking in a loop grew this with its messages.
            if len(held.replies) < _REPLIES_KEPT:
                held.replies[id(v)] = reply
        return reply

    def _analyse(self, now: float, refresh: float) -> JobAnalysis:
        """The job's analysis, at most ANALYZE_EVERY_S old (one pass over every
        rank: it runs only while a sidecar asks, during an incident)."""
        a = self.analysis
        if a is not None and not self._due(now):
            return a
        # Every sidecar uploads every rank at each sync: the latest uploads are
        # a sync old. Only those of a sidecar that stopped syncing are aged (by
        # the heartbeat limit that made its own ``refresh``: digest.refresh_s),
        # which keeps a pass over 100,000 ranks cheap.
        limits = {sid: 3.0 * r + self.vouched_s for sid, r in self._refreshes.items()}
        limit = 3.0 * refresh + self.vouched_s
        ranks = (
            s if now - at <= _FRESH_S else aged(s, now - at, limits.get(owner, limit))
            for s, at, owner in self.store.latest_owned()
        )
        self._analysed_changes = self.store.changes
        # The pass's new objects (a few per rank) all go by reference counting
        # when it ends; counted by the cyclic collector they set off 2-3 full
        # collections of the whole heap per pass at 100,000 ranks: half its time.
        was = gc.isenabled()
        gc.disable()
        try:
            self.analysis = judge_job(ranks, self.store.version, now)
        finally:
            if was:
                gc.enable()
        self.analyses += 1
        return self.analysis

    def _episode(self, sidecar_id: str, note: EpisodeNote | None) -> EpisodeNote | None:
        ep = self.episode
        if note is not None and note.closed:
            if note.opened_by == sidecar_id and (ep is None or ep.id != note.id):
                self.closed.append(note)
            note = None
        if ep is not None and ep.opened_by not in self._seen:
            ep = None  # its opener is gone
        if ep is not None and ep.opened_by == sidecar_id and (note is None or note.id != ep.id):
            ep = None  # closed by the sidecar that opened it
        if note is not None and note.opened_by == sidecar_id and ep is None:
            ep = note  # first come: one episode per job at a time
        elif note is not None and ep is not None and note.id == ep.id and note.where:
            # Followers add where their culprits are stuck: their own ranks only
            # (read from their own stacks), and at most MAX_NOTE_RANKS places in
            # all (each note may bring that many; every node is sent them).
            mine = self.store.owned(sidecar_id)
            where = dict(ep.where)
            for rank, place in note.where.items():
                if rank in mine and (rank in where or len(where) < MAX_NOTE_RANKS):
                    where[rank] = place
            if where != ep.where:
                ep = replace(ep, where=where)
        return ep
