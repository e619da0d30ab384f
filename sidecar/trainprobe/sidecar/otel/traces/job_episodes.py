"""A summary-mode upstream's job episodes as spans: one span per episode it holds.

The upstream hosts each job's coordinator (``core/job/hub.py``); a job's
episode there is the note the node that opened it sent (its opener, verdict,
rule, culprits, where they are stuck). The nodes export their own ranks'
spans; the upstream exports one span per episode, with job-level attributes
only. Its telemetry reads ``{job: episode}`` about once a second and hands it
to :meth:`JobEpisodeSpans.poll`: :func:`episode_changes` says which episodes
appeared and which went (closed by their opener, replaced by another, their
job ended at the hub) since the last poll. A span starts when its episode was
first seen and is exported when it ends (OTLP has no open span); what it
says is the episode's last note, so culprits named after it opened are in it.
An episode that opened and closed at its node between two syncs (a node
that kills its own culprit at once) reaches the hub only as a closed note,
never held open (``EpisodeNote.closed``): its span starts and ends at the
poll that finds it.

The nodes are clients: every string of a note is escaped (:func:`printable`)
and cut, at most :data:`CULPRITS_LISTED` culprits are listed (all are
counted), and the span count is bounded: at most :data:`MAX_OPEN` episodes
held (the hub's job limit), and a token bucket per job (:data:`JOB_BURST`,
then one every :data:`JOB_REFILL_S`) and one for all jobs
(:data:`ALL_BURST`, then :data:`ALL_PER_S` a second), so a node flapping
episode ids, or job ids, gets a few spans and a count, not a flood: an
episode over either is held untraced, and the next traced one of its job
says how many were (``trainprobe.episodes.suppressed``). Pure: no
OpenTelemetry import, the time passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainprobe.sidecar.core import limits
from trainprobe.sidecar.core.job.view import EpisodeNote
from trainprobe.sidecar.core.text import printable
from trainprobe.sidecar.otel.traces.ids import episode_trace_id, span_id
from trainprobe.sidecar.otel.traces.spans import AttrValue, SpanDesc, WallClock

__all__ = [
    "ALL_BURST",
    "ALL_PER_S",
    "CULPRITS_LISTED",
    "JOB_BURST",
    "JOB_REFILL_S",
    "MAX_OPEN",
    "JobEpisodeSpans",
    "bounded",
    "episode_changes",
]

#: Episodes held at once: one per job at the hub, whose jobs are bounded so.
MAX_OPEN = limits.MAX_SYNC_JOBS
#: Culprit ranks a span lists (``trainprobe.culprits.count`` counts them all).
CULPRITS_LISTED = 16
#: Spans a job may start at once, then one more every JOB_REFILL_S.
JOB_BURST = 3
JOB_REFILL_S = 60.0
#: Spans all jobs together may start at once, then ALL_PER_S a second.
ALL_BURST = 256
ALL_PER_S = 1.0
#: Job rate buckets remembered (a full bucket is forgotten: it is a new one).
_BUCKETS = 4 * MAX_OPEN
_ID_CHARS, _TEXT_CHARS, _WHERE_CHARS = 256, 512, 1024
_STOPPED = frozenset({"HUNG", "UNRESPONSIVE", "DEAD"})
_WORD = re.compile(r"[A-Za-z0-9_.-]{1,32}")


def bounded(value: object, limit: int = _ID_CHARS) -> str:
    """A client's string as span text: escaped, then cut to ``limit`` characters."""
    text = printable(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def episode_changes(
    held: Mapping[str, str], seen: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """(jobs whose episode appeared, jobs whose episode went) between two polls.

    ``held``: job -> the episode id held after the last poll; ``seen``: job ->
    the id the hub holds now (a job without an episode is absent). A job
    whose id changed is in both: one episode went and another came.
    """
    opened = [job for job, eid in seen.items() if held.get(job) != eid]
    went = [job for job, eid in held.items() if seen.get(job) != eid]
    return opened, went


@dataclass
class _Held:
    note: EpisodeNote
    since: float
    traced: bool
    #: Episodes of the job not traced before this one (the rate limit).
    suppressed: int = 0


@dataclass
class _Bucket:
    tokens: float
    at: float
    suppressed: int = 0


class _Rate:
    """Token buckets by key: ``burst`` at once, then one every ``refill_s``."""

    def __init__(self, burst: int, refill_s: float, remembered: int) -> None:
        self.burst, self.refill_s, self.remembered = burst, refill_s, remembered
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str, now: float) -> _Bucket | None:
        """The key's bucket with a token taken, or None (its ``suppressed`` counted)."""
        b = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
        b.tokens, b.at = min(float(self.burst), b.tokens + (now - b.at) / self.refill_s), now
        self._buckets[key] = b  # the most recent last: the least recent goes first
        if len(self._buckets) > self.remembered:
            del self._buckets[next(iter(self._buckets))]
        if b.tokens < 1.0:
            b.suppressed += 1
            return None
        b.tokens -= 1.0
        return b

    def prune(self, now: float) -> None:
        """Forget the buckets that are full again with nothing to tell."""
        full = [
            k
            for k, b in self._buckets.items()
            if not b.suppressed and b.tokens + (now - b.at) / self.refill_s >= self.burst
        ]
        for k in full:
            del self._buckets[k]

    def __len__(self) -> int:
        return len(self._buckets)


class JobEpisodeSpans:
    """What the upstream's telemetry remembers of the episodes it traces."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._jobs = _Rate(JOB_BURST, JOB_REFILL_S, _BUCKETS)
        self._all = _Rate(ALL_BURST, 1.0 / ALL_PER_S, 1)
        #: Episodes not traced since start: each one over a rate once, and one
        #: over MAX_OPEN at each poll that finds no room for it (the hub's job
        #: limit is the same, so that takes a hub that changed it).
        self.suppressed = 0
        self._prune_at = float("-inf")

    def __len__(self) -> int:
        return len(self._held)

    def poll(
        self,
        seen: Mapping[str, EpisodeNote | None],
        now: float,
        wall_minus_mono_s: float,
        closed: Sequence[tuple[str, EpisodeNote]] = (),
    ) -> list[SpanDesc]:
        """The spans of the episodes that went since the last poll. ``seen``:
        every job at the hub now, with its episode or None; ``closed``: (job,
        note) of episodes that opened and closed at their node between two of
        its syncs, never held open (a span that starts and ends now)."""
        ids = {job: ep.id for job, ep in seen.items() if ep is not None}
        opened, went = episode_changes({j: h.note.id for j, h in self._held.items()}, ids)
        out: list[SpanDesc] = []
        for job in went:
            why = "replaced" if job in ids else "closed" if job in seen else "job ended"
            span = self._end(job, self._held.pop(job), now, wall_minus_mono_s, why)
            if span is not None:
                out.append(span)
        for job, ended in closed:
            if ids.get(job) == ended.id:
                continue  # held open after all: its span ends when it goes
            span = self._end(job, self._open(job, ended, now), now, wall_minus_mono_s, "closed")
            if span is not None:
                out.append(span)
        for job, held in self._held.items():
            note = seen.get(job)
            if note is not None:
                held.note = note  # culprits and places named since it opened
        for job in opened:
            note = seen[job]
            assert note is not None
            if len(self._held) >= MAX_OPEN:
                self.suppressed += 1
                continue
            self._held[job] = self._open(job, note, now)
        if now >= self._prune_at:  # a pass over every bucket: not at every poll
            self._jobs.prune(now)
            self._prune_at = now + JOB_REFILL_S
        return out

    def close_all(self, now: float, wall_minus_mono_s: float, why: str) -> list[SpanDesc]:
        """End every held episode now (the upstream stops)."""
        held, self._held = self._held, {}
        spans = (self._end(job, h, now, wall_minus_mono_s, why) for job, h in held.items())
        return [s for s in spans if s is not None]

    def _open(self, job: str, note: EpisodeNote, now: float) -> _Held:
        bucket = self._jobs.take(job, now)
        if bucket is None or self._all.take("", now) is None:
            if bucket is not None:
                bucket.suppressed += 1
            self.suppressed += 1
            return _Held(note, now, traced=False)
        before, bucket.suppressed = bucket.suppressed, 0
        return _Held(note, now, traced=True, suppressed=before)

    def _end(
        self, job: str, held: _Held, now: float, wall_minus_mono_s: float, why: str
    ) -> SpanDesc | None:
        if not held.traced:
            return None
        n = held.note
        clock = WallClock(wall_minus_mono_s)
        culprits = sorted(int(r) for r in n.culprits)
        verdict, rule = bounded(n.verdict, 32), bounded(n.rule, 64)
        named = " ".join(w for w in (n.verdict, n.rule) if _WORD.fullmatch(w))
        attrs: dict[str, AttrValue] = {
            "trainprobe.job_id": bounded(job),
            "trainprobe.episode.id": bounded(n.id),
            "trainprobe.episode.opened_by": bounded(n.opened_by),
            "trainprobe.verdict": verdict,
            "trainprobe.rule": rule,
            "trainprobe.episode.kind": bounded(n.kind, 64),
            "trainprobe.culprits": culprits[:CULPRITS_LISTED],
            "trainprobe.culprits.count": len(culprits),
            "trainprobe.episode.end": why,
        }
        if n.text:
            attrs["trainprobe.episode.text"] = bounded(n.text, _TEXT_CHARS)
        if n.where:
            # The culprits' places first: a cut keeps those.
            order = sorted(n.where, key=lambda r: (r not in n.culprits, r))
            where = "; ".join(f"{int(r)}: {n.where[r]}" for r in order[:CULPRITS_LISTED])
            attrs["trainprobe.episode.where"] = bounded(where, _WHERE_CHARS)
        if held.suppressed:
            attrs["trainprobe.episodes.suppressed"] = held.suppressed
        listed = ",".join(map(str, culprits[:CULPRITS_LISTED]))
        more = "..." if len(culprits) > CULPRITS_LISTED else ""
        start = clock.local_ns(held.since)
        return SpanDesc(
            name=f"job episode {named}".rstrip(),
            trace_id=episode_trace_id(job, n.id),
            span_id=span_id("job-episode", job, n.id, round(held.since * 1e6)),
            parent_id=None,
            start_ns=start,
            end_ns=max(start, clock.local_ns(now)),
            attributes=attrs,
            error=f"{verdict} ({rule}): culprits [{listed}{more}]"
            if n.verdict in _STOPPED
            else None,
        )
