"""A job coordinator's rank store: one summary per rank, each with a version.

Every sidecar of a job uploads its ranks' summaries at each sync; the store
keeps one per rank (the latest uploader owns it) with the time it arrived
and the job-wide version at which it last changed beyond aging
(:func:`~trainprobe.sidecar.core.job.digest.same_summary`). A sidecar that
needs the other sidecars' ranks asks for those changed since the version it
holds (:meth:`RankStore.delta`); one that does not gets the bounded
:class:`~trainprobe.sidecar.core.job.digest.JobDigest`. Removals (a sidecar
gone quiet, a rank no longer uploaded) are versioned too, so a delta says
what to drop.

Every sync costs the store the uploader's ranks, plus, for a delta, what
changed since: the versions are kept in change order (dicts keep insertion
order), read from the newest back. Only a full answer, and the digest's step
range (at most once a second), read every rank.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainprobe.sidecar.core.job.digest import (
    DIGEST_MAX_SUSPECTS,
    REPORTING_REFRESH_S,
    JobDigest,
    is_suspect,
    same_summary,
    state_key,
)
from trainprobe.sidecar.core.judge.diagnosis import RankSummary

__all__ = ["STEP_RANGE_EVERY_S", "Held", "RankStore"]

#: The digest's step range is read from every rank at most this often.
STEP_RANGE_EVERY_S = 1.0


@dataclass(frozen=True)
class Held:
    """One rank's summary at the coordinator."""

    summary: RankSummary
    #: On the coordinator's clock.
    received_at: float
    version: int
    owner: str
    #: The version at which ``owner`` took it (from another sidecar, or new).
    owned_since: int


class RankStore:
    """Versioned rank summaries of one job (see the module docstring)."""

    def __init__(self, instance: str = "") -> None:
        #: Names this store: a version is only meaningful with it (a coordinator
        #: created again starts counting again).
        self.instance = instance
        self.version = 0
        #: Counts changes of what a rank is doing (state_key), not of its ages
        #: or a refreshed report: an analysis of unchanged ranks says the same.
        self.changes = 0
        self._held: dict[int, Held] = {}
        #: rank -> (its latest upload, when): what the job's analysis reads.
        self._latest: dict[int, tuple[RankSummary, float]] = {}
        #: rank -> version, oldest change first; removals likewise.
        self._changed: dict[int, int] = {}
        self._removed: dict[int, int] = {}
        self._owned: dict[str, frozenset[int]] = {}
        self._suspect: dict[int, None] = {}
        self._reporting: dict[int, None] = {}
        self._steps: tuple[float, int, int, int] = (float("-inf"), 0, 0, 0)

    def __len__(self) -> int:
        return len(self._held)

    def upload(
        self,
        sidecar_id: str,
        summaries: Sequence[RankSummary],
        now: float,
        refresh: float = REPORTING_REFRESH_S,
        taken: Sequence[float] | None = None,
    ) -> None:
        """Store ``sidecar_id``'s ranks, as taken just now, or each at its time
        in ``taken`` (a summary a node did not send again: summary mode) and
        aged from then (``refresh``: see
        :func:`~trainprobe.sidecar.core.job.digest.same_summary`)."""
        mine = frozenset(s.rank for s in summaries)
        for rank in self._owned.get(sidecar_id, frozenset()) - mine:
            self._drop(rank, sidecar_id)
        self._owned[sidecar_id] = mine
        latest = self._latest
        for i, s in enumerate(summaries):
            at = now if taken is None else taken[i]
            latest[s.rank] = (s, at)
            # Suspicion and reporting come from every upload (the uploader's
            # fresh reading), even where the summary held stays.
            self._mark(self._suspect, s.rank, is_suspect(s))
            self._mark(self._reporting, s.rank, s.reporting and not s.ended)
            held = self._held.get(s.rank)
            if (
                held is not None
                and held.owner == sidecar_id
                and same_summary(held.summary, s, at - held.received_at, refresh)
            ):
                continue
            self.version += 1
            if held is None or held.owner != sidecar_id or state_key(held.summary) != state_key(s):
                self.changes += 1
            since = (
                held.owned_since if held is not None and held.owner == sidecar_id else self.version
            )
            self._held[s.rank] = Held(s, at, self.version, sidecar_id, since)
            self._changed.pop(s.rank, None)
            self._changed[s.rank] = self.version
            self._removed.pop(s.rank, None)

    def forget(self, sidecar_id: str) -> None:
        """Drop a sidecar and the ranks it still owns."""
        for rank in self._owned.pop(sidecar_id, frozenset()):
            self._drop(rank, sidecar_id)

    def _drop(self, rank: int, owner: str) -> None:
        held = self._held.get(rank)
        if held is None or held.owner != owner:
            return  # another sidecar uploads it now
        del self._held[rank]
        self._latest.pop(rank, None)
        self._changed.pop(rank, None)
        self._suspect.pop(rank, None)
        self._reporting.pop(rank, None)
        self.version += 1
        self.changes += 1
        self._removed[rank] = self.version

    @staticmethod
    def _mark(marks: dict[int, None], rank: int, on: bool) -> None:
        if on:
            marks[rank] = None
        else:
            marks.pop(rank, None)

    def owned(self, sidecar_id: str) -> frozenset[int]:
        """The ranks ``sidecar_id`` uploaded last."""
        return self._owned.get(sidecar_id, frozenset())

    def latest(self) -> Iterable[tuple[RankSummary, float]]:
        """Every rank's latest upload and when it came (a view: read it before the
        next upload). Unlike the held summary, it is as fresh as its sidecar's
        last sync: only a rank whose sidecar stopped syncing needs aging."""
        return self._latest.values()

    def latest_owned(self) -> Iterable[tuple[RankSummary, float, str]]:
        """:meth:`latest`, with each rank's owner."""
        held = self._held
        return ((s, at, held[s.rank].owner) for s, at in self._latest.values())

    def these(
        self, ranks: Iterable[int], sidecar_id: str, now: float
    ) -> tuple[tuple[RankSummary, float], ...]:
        """The ranks named that another sidecar owns, with their age on this clock."""
        out = []
        for rank in ranks:
            h = self._held.get(rank)
            if h is not None and h.owner != sidecar_id:
                out.append((h.summary, max(0.0, now - h.received_at)))
        return tuple(out)

    def full(self, sidecar_id: str, now: float) -> tuple[tuple[RankSummary, float], ...]:
        """Every rank the other sidecars own, with its age on this clock."""
        return tuple(
            (h.summary, max(0.0, now - h.received_at))
            for h in self._held.values()
            if h.owner != sidecar_id
        )

    def delta(
        self, sidecar_id: str, since: int, now: float
    ) -> tuple[tuple[tuple[RankSummary, float], ...], tuple[int, ...]]:
        """What changed since version ``since``: the others' ranks, and the
        ranks to drop (removed, or now ``sidecar_id``'s own)."""
        changed: list[tuple[RankSummary, float]] = []
        gone: list[int] = []
        for rank, v in reversed(self._changed.items()):
            if v <= since:
                break
            h = self._held[rank]
            if h.owner == sidecar_id:
                if h.owned_since > since:
                    gone.append(rank)  # it moved there: hearsay of it is outdated
            else:
                changed.append((h.summary, max(0.0, now - h.received_at)))
        for rank, v in reversed(self._removed.items()):
            if v <= since:
                break
            gone.append(rank)
        return tuple(changed), tuple(sorted(gone))

    def digest(self, now: float) -> JobDigest:
        """The job at a glance; its step range is at most STEP_RANGE_EVERY_S old."""
        at, lo, hi, world = self._steps
        if now - at >= STEP_RANGE_EVERY_S:
            stepped = [h.summary.step for h in self._held.values() if h.summary.has_step]
            world = max((h.summary.world_size for h in self._held.values()), default=0)
            lo, hi = (min(stepped), max(stepped)) if stepped else (0, 0)
            self._steps = (now, lo, hi, world)
        named = tuple(sorted(itertools.islice(self._suspect, DIGEST_MAX_SUSPECTS)))
        return JobDigest(
            version=self.version,
            ranks=len(self._held),
            world_size=world,
            reporting=len(self._reporting),
            min_step=lo,
            max_step=hi,
            suspects=len(self._suspect),
            suspect_ranks=named,
        )
