"""The upstream's half of summary mode: each job's coordinator, fed by node streams.

Outside Ray, node sidecars that judge their own ranks keep one JobSync
stream each to an upstream sidecar (``job_sync_to``). The upstream hosts
one :class:`~trainprobe.sidecar.core.job.view.CoordinatorState` per job, as
the Ray coordinator actor does, and this hub feeds it: a node sends only
what changed (:mod:`~.uplink`), so the hub keeps each node's last summaries
and hands the coordinator the node's whole set: a summary not sent again is
one whose node says nothing that matters changed.

What a node may do, and what it is refused (:class:`Refused`, which ends its
stream; nothing else changes):

- one live stream per node id;
- summaries only for ranks no other live node holds: the first node to
  upload a rank claims it until it drops it, its job ends there or its
  stream ends;
- every string, count and number within :mod:`~trainprobe.sidecar.core.limits`
  (ranks per node, jobs per node and in all, nodes);
- an episode note only for the job it uploads.

Answers: a node that asks for the other ranks gets them (a delta) at every
upload; otherwise it gets the job's digest and episode on its first upload
and whenever they change in a way that matters (an episode, a suspect or
missing rank), pushed to every node of the job at once.

Pure: plain data and the time in, replies out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainprobe.sidecar.core import limits
from trainprobe.sidecar.core.job.checks import note_problem, problem, text_problem
from trainprobe.sidecar.core.job.uplink import HEARTBEAT_S, Upload
from trainprobe.sidecar.core.job.verdict import too_large_to_send
from trainprobe.sidecar.core.job.view import CoordinatorState, EpisodeNote, SyncReply
from trainprobe.sidecar.core.judge.diagnosis import RankSummary
from trainprobe.sidecar.core.text import printable

__all__ = ["PUSH_AGAIN_S", "Push", "Refused", "SummaryHub", "problem"]

#: An analysis that says what the last pushed one said is pushed again this
#: often (its text and counts refreshed); a node that missed a push is answered
#: at its next upload.
PUSH_AGAIN_S = 30.0

#: (node, job, reply) for another node's stream.
Push = tuple[str, str, SyncReply]

#: A job's digest is pushed to its nodes at most this often; a change within
#: it goes with the next tick (a node flipping a rank at every message made
#: every message a push to every node of the job).
DIGEST_PUSH_EVERY_S = 0.25


class Refused(Exception):
    """A node's message is refused: its stream ends with ``code`` (a gRPC status name)."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


@dataclass
class _Node:
    node_id: str
    #: job -> rank -> (summary, received at).
    jobs: dict[str, dict[int, tuple[RankSummary, float]]] = field(default_factory=dict)
    notes: dict[str, EpisodeNote | None] = field(default_factory=dict)
    detail: dict[str, bool] = field(default_factory=dict)
    #: job -> what the node was last told (see _key).
    told: dict[str, tuple[object, ...]] = field(default_factory=dict)
    #: job -> the analysis (its count at the job) whose verdict the node holds.
    verdict_of: dict[str, int] = field(default_factory=dict)


def _key(reply: SyncReply) -> tuple[object, ...]:
    """What a node that holds only the digest must hear of when it changes."""
    ep, d = reply.episode, reply.digest
    alarm = d is not None and (d.suspects > 0 or d.ranks < d.world_size)
    return (ep.id if ep else "", tuple(sorted(ep.where.items())) if ep else (), alarm)


class SummaryHub:
    """Every job's :class:`CoordinatorState` at one upstream, and its nodes."""

    def __init__(self, instance: str, stale_after_s: float = 30.0) -> None:
        self.instance = instance
        self.stale_after_s = stale_after_s
        self.jobs: dict[str, CoordinatorState] = {}
        self._nodes: dict[str, _Node] = {}
        #: job -> its nodes; (job, rank) -> the node that holds it.
        self._members: dict[str, dict[str, None]] = {}
        self._claims: dict[tuple[str, int], str] = {}
        self._told: dict[str, tuple[object, ...]] = {}
        self._created = 0
        #: job -> the nodes that hold its verdict and no longer ask at every
        #: sync (a large job in an incident): each new analysis is pushed to them.
        self._watchers: dict[str, dict[str, None]] = {}
        #: job -> what its last pushed analysis said, when, and its count.
        self._pushed: dict[str, tuple[tuple[object, ...], float, int]] = {}
        #: job -> when its digest was last pushed; jobs whose change waits for a tick.
        self._digest_at: dict[str, float] = {}
        self._deferred: dict[str, None] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def ranks(self) -> int:
        return len(self._claims)

    def join(self, node_id: str) -> None:
        if not node_id or len(node_id) > limits.MAX_ID_LEN:
            raise Refused("INVALID_ARGUMENT", "a JobSync stream needs a node_id of 1-256 chars")
        if node_id in self._nodes:
            raise Refused("ALREADY_EXISTS", f"node {printable(node_id)} already has a stream")
        if len(self._nodes) >= limits.MAX_SYNC_NODES:
            raise Refused("RESOURCE_EXHAUSTED", f"{limits.MAX_SYNC_NODES} nodes already sync")
        self._nodes[node_id] = _Node(node_id)

    def leave(self, node_id: str) -> None:
        node = self._nodes.pop(node_id, None)
        if node is not None:
            for job in list(node.jobs):
                self._end(node_id, node, job)

    def apply(
        self, node_id: str, uploads: Sequence[Upload], refresh_s: float, now: float
    ) -> tuple[list[tuple[str, SyncReply]], list[Push]]:
        """Take one message of ``node_id`` (joined): its replies, and pushes to
        other nodes. Raises :class:`Refused` before changing anything."""
        node = self._nodes[node_id]
        if not (math.isfinite(refresh_s) and 0.1 <= refresh_s <= 60.0):
            raise Refused("INVALID_ARGUMENT", f"refresh_s={refresh_s!r} out of 0.1..60")
        self._check(node_id, node, uploads)
        replies: list[tuple[str, SyncReply]] = []
        pushes: list[Push] = []
        for up in uploads:
            if up.ended:
                if up.job_id in node.jobs:
                    self._end(node_id, node, up.job_id)
                continue
            reply = self._sync(node_id, node, up, refresh_s, now)
            key = _key(reply)
            if self._news(node, up, reply, key):
                replies.append((up.job_id, reply))
                node.told[up.job_id] = key
            if self._told.get(up.job_id) != key or up.job_id in self._deferred:
                if now - self._digest_at.get(up.job_id, -math.inf) < DIGEST_PUSH_EVERY_S:
                    self._deferred[up.job_id] = None
                    continue
                self._deferred.pop(up.job_id, None)
                self._told[up.job_id], self._digest_at[up.job_id] = key, now
                pushes.extend(self._push(up.job_id, node_id, reply, key, now))
        return replies, pushes

    def _news(self, node: _Node, up: Upload, reply: SyncReply, key: tuple[object, ...]) -> bool:
        """Whether ``reply`` tells the node something it does not hold. A large
        job's verdict (and the summaries it names) is the same until the job is
        analysed again: a node polling for details twice a second would be sent
        it again, encoded again, each time (most of an incident's CPU at 12,500
        nodes); what it holds ages on its own clock (JobView.remote)."""
        job, told = up.job_id, node.told.get(up.job_id)
        watchers = self._watchers.setdefault(job, {})
        if reply.verdict is None:
            node.verdict_of.pop(job, None)
            watchers.pop(node.node_id, None)
            return up.detail or told != key
        watchers[node.node_id] = None
        analyses = self.jobs[job].analyses
        if told == key and node.verdict_of.get(job) == analyses:
            return False
        node.verdict_of[job] = analyses
        return True

    def tick(self, now: float) -> list[Push]:
        """Each large job's new analysis, pushed to the nodes that hold its
        verdict: they no longer ask at every sync (:class:`~.uplink.Uplink`),
        so an incident costs the upstream an analysis a second (fewer once
        settled, :meth:`CoordinatorState.reanalyse`) and a push when what it
        says changed, not a message from every node twice a second."""
        out = self._deferred_pushes(now)
        for job, watchers in self._watchers.items():
            state = self.jobs.get(job)
            if state is None or not watchers:
                continue
            # An upload that asked may have run the analysis already: push that one.
            a = state.reanalyse(now) or state.analysis
            last = self._pushed.get(job)
            if a is None or (last is not None and last[2] == state.analyses):
                continue
            d = a.diagnosis
            # What a node acts on; the waiting count only by its order (a job's
            # ranks enter the wait over a second or two: a push per analysis then
            # was most of an incident's messages at 12,500 nodes).
            said = (d.kind, d.culprits, len(d.waiting).bit_length(), a.healthy is None,
                    round(d.confidence, 1))  # fmt: skip
            if last is not None and last[0] == said and now - last[1] < PUSH_AGAIN_S:
                continue
            self._pushed[job] = (said, now, state.analyses)
            out.extend(self._to_watchers(job, state, now))
        return out

    def _deferred_pushes(self, now: float) -> list[Push]:
        """The digest changes held back (DIGEST_PUSH_EVERY_S), once it has passed."""
        out: list[Push] = []
        for job in list(self._deferred):
            if now - self._digest_at.get(job, -math.inf) < DIGEST_PUSH_EVERY_S:
                continue
            del self._deferred[job]
            state = self.jobs.get(job)
            if state is None:
                continue
            reply = SyncReply((), state.episode, state.store.digest(now), detail=False, full=False)
            key = _key(reply)
            if self._told.get(job) != key:
                self._told[job], self._digest_at[job] = key, now
                out.extend(self._push(job, "", reply, key, now))
        return out

    def _to_watchers(
        self, job: str, state: CoordinatorState, now: float, episode: bool = False
    ) -> list[Push]:
        a = state.analysis
        if a is None:
            return []
        out: list[Push] = []
        replies: dict[int, SyncReply] = {}  # one reply (encoded once) per distinct verdict
        for other in self._watchers.get(job, {}):
            node = self._nodes[other]
            if node.verdict_of.get(job) == state.analyses and not episode:
                continue  # answered with this one when it asked
            mine = node.jobs.get(job, {}).keys()
            reply = state.pushed(a, mine, now)
            reply = replies.setdefault(id(reply.verdict), reply)
            node.told[job], node.verdict_of[job] = _key(reply), state.analyses
            out.append((other, job, reply))
        return out

    def missed(self, node_id: str, job: str) -> None:
        """``node_id``'s stream dropped a push of ``job`` (its outbox was full):
        it does not hold what the push said, so its next upload is answered."""
        node = self._nodes.get(node_id)
        if node is not None:
            node.told.pop(job, None)
            node.verdict_of.pop(job, None)

    def _check(self, node_id: str, node: _Node, uploads: Sequence[Upload]) -> None:
        jobs = set(node.jobs)
        # job -> the ranks the node holds there once this message is applied
        #: (_sync's order: full, dropped, ranks): a rank dropped many times, or
        #: dropped and sent again, frees no room.
        after: dict[str, set[int]] = {}
        for up in uploads:
            empty = None if up.job_id else "an empty job_id"
            if err := text_problem(up.job_id, "job_id") or empty:
                raise Refused("INVALID_ARGUMENT", err)
            if up.ended:
                after[up.job_id] = set()
                continue
            new = up.job_id not in jobs and up.job_id not in self.jobs
            if new and len(self.jobs) + len(jobs - self.jobs.keys()) >= limits.MAX_SYNC_JOBS:
                raise Refused("RESOURCE_EXHAUSTED", f"{limits.MAX_SYNC_JOBS} jobs already")
            jobs.add(up.job_id)
            mine = after.setdefault(up.job_id, set(node.jobs.get(up.job_id, {})))
            if up.full:
                mine.clear()
            mine.difference_update(up.dropped)
            mine.update(s.rank for s in up.ranks)
            if up.note is not None and (err := note_problem(up.note, up.job_id)):
                raise Refused("INVALID_ARGUMENT", f"job {printable(up.job_id)}: {err}")
            for s in up.ranks:
                if err := problem(s):
                    raise Refused("INVALID_ARGUMENT", f"job {printable(up.job_id)}: {err}")
                owner = self._claims.get((up.job_id, s.rank), node_id)
                if owner != node_id:
                    raise Refused(
                        "PERMISSION_DENIED",
                        f"rank {s.rank} of job {printable(up.job_id)} is held by another node "
                        f"({printable(owner)})",
                    )
        if len(jobs) > limits.MAX_SYNC_JOBS_PER_NODE:
            raise Refused("RESOURCE_EXHAUSTED", f"over {limits.MAX_SYNC_JOBS_PER_NODE} jobs")
        held = sum(len(r) for j, r in node.jobs.items() if j not in after)
        if held + sum(len(r) for r in after.values()) > limits.MAX_SYNC_RANKS_PER_NODE:
            raise Refused("RESOURCE_EXHAUSTED", f"over {limits.MAX_SYNC_RANKS_PER_NODE} ranks")

    def _sync(
        self, node_id: str, node: _Node, up: Upload, refresh_s: float, now: float
    ) -> SyncReply:
        job = up.job_id
        mirror = node.jobs.setdefault(job, {})
        self._members.setdefault(job, {})[node_id] = None
        if up.full:
            for rank in mirror.keys() - {s.rank for s in up.ranks}:
                self._release(job, rank, node_id)
            mirror.clear()
        for rank in up.dropped:
            if mirror.pop(rank, None) is not None:
                self._release(job, rank, node_id)
        for s in up.ranks:
            mirror[s.rank] = (s, now)
            self._claims[(job, s.rank)] = node_id
        node.notes[job], node.detail[job] = up.note, up.detail
        # Not aged: a node's silence about a rank says nothing that matters changed
        # (uplink.py), and it sends every change while anyone needs the details.
        ranks = [s for s, _ in mirror.values()]
        state = self.jobs.get(job)
        if state is None:
            self._created += 1
            state = self.jobs[job] = CoordinatorState(
                self.stale_after_s, f"{self.instance}.{self._created}", vouched_s=HEARTBEAT_S
            )
        return state.sync(
            node_id, ranks, up.note, now, up.detail, up.since, refresh_s, up.bounded,
            [t for _, t in mirror.values()],
        )  # fmt: skip

    def _push(
        self, job: str, sender: str, reply: SyncReply, key: tuple[object, ...], now: float
    ) -> list[Push]:
        digest_only = SyncReply((), reply.episode, reply.digest, detail=False, full=False)
        state = self.jobs.get(job)
        watchers = self._watchers.setdefault(job, {})
        if state is not None and key[2] and too_large_to_send(len(state.store), 0):
            # A large job's alarm carries its verdict: every node would ask for it
            # at once (12,500 asks queued at the upstream), and a node learnt the
            # culprit only when its own ask came round. Each holds it now, as if
            # it had asked (one that asks already is answered at its next upload).
            for other in self._members.get(job, {}):
                node = self._nodes.get(other)
                if other == sender or node is None or node.detail.get(job):
                    continue
                if too_large_to_send(len(state.store), len(node.jobs.get(job, {}))):
                    watchers[other] = None
            state.reanalyse(now)
        out = [
            p
            for p in (self._to_watchers(job, state, now, True) if state and watchers else [])
            if p[0] != sender
        ]
        for other in self._members.get(job, {}):
            node = self._nodes.get(other)
            if other == sender or node is None or node.detail.get(job) or other in watchers:
                continue  # one that asks for details is answered at its next upload
            if node.told.get(job) != key:
                node.told[job] = key
                out.append((other, job, digest_only))
        return out

    def _release(self, job: str, rank: int, node_id: str) -> None:
        if self._claims.get((job, rank)) == node_id:
            del self._claims[(job, rank)]

    def _end(self, node_id: str, node: _Node, job: str) -> None:
        for rank in node.jobs.pop(job, {}):
            self._release(job, rank, node_id)
        for part in (node.notes, node.detail, node.told, node.verdict_of):
            part.pop(job, None)
        self._watchers.get(job, {}).pop(node_id, None)
        members = self._members.get(job, {})
        members.pop(node_id, None)
        state = self.jobs.get(job)
        if state is not None:
            state.store.forget(node_id)
        if not members:
            self._members.pop(job, None)
            self.jobs.pop(job, None)
            self._told.pop(job, None)
            self._watchers.pop(job, None)
            self._pushed.pop(job, None)
            self._digest_at.pop(job, None)
            self._deferred.pop(job, None)
