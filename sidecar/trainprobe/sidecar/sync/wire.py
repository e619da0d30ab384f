"""JobSync messages ⇄ the core's summaries, notes, uploads and replies.

Conversions only: what a value may be is the hub's to judge
(:func:`~trainprobe.sidecar.core.job.hub.problem`). A repeated field longer
than the hub would take is cut here, before it becomes Python objects, so an
oversized message costs its bytes, never a list of that length.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from trainprobe.proto import probe_pb2 as pb
from trainprobe.sidecar.core import limits
from trainprobe.sidecar.core.job.digest import JobDigest
from trainprobe.sidecar.core.job.hub import Refused
from trainprobe.sidecar.core.job.uplink import Upload
from trainprobe.sidecar.core.job.verdict import JobVerdict
from trainprobe.sidecar.core.job.view import EpisodeNote, SyncReply
from trainprobe.sidecar.core.judge.diagnosis import GroupProgress, RankSummary

__all__ = ["reply_of", "reply_pb", "upload_pb", "uploads_of"]


def _rank_pb(s: RankSummary, held_s: float = 0.0) -> pb.SyncedRank:
    return pb.SyncedRank(
        rank=s.rank,
        world_size=s.world_size,
        host=s.host,
        pid=s.pid,
        node=s.node,
        reporting=s.reporting,
        ended=s.ended,
        report_age_s=s.report_age_s,
        has_step=s.has_step,
        step=s.step,
        step_age_s=s.step_age_s,
        phases=s.phases,
        groups=[
            pb.SyncedGroup(
                group=g.group,
                issued=g.issued,
                completed=g.completed,
                in_flight=g.inflight_age_s is not None,
                inflight_age_s=g.inflight_age_s or 0.0,
                inflight_op=g.inflight_op,
                inflight_seq=g.inflight_seq,
            )
            for g in s.groups
        ],
        verdict=s.verdict,
        replica=s.replica,
        ft_wait=s.ft_wait,
        ft_wait_age_s=s.ft_wait_age_s,
        verified=s.verified,
        normal_step_s=s.normal_step_s,
        kernel=s.kernel,
        kernel_age_s=s.kernel_age_s,
        held_s=held_s,
    )


#: Summaries encoded lately, by identity (the summary is kept, so its id is not
#: reused): an upstream answers every node polling a large job's verdict with
#: the same few held summaries (verdict.exemplars), so each is encoded once.
_ENCODED: dict[int, tuple[RankSummary, pb.SyncedRank]] = {}
_ENCODED_MAX = 1024


def _held_pb(s: RankSummary, held_s: float) -> pb.SyncedRank:
    hit = _ENCODED.get(id(s))
    if hit is None or hit[0] is not s:
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        hit = _ENCODED[id(s)] = (s, _rank_pb(s))
    m = pb.SyncedRank()
    m.CopyFrom(hit[1])
    m.held_s = held_s
    return m


def _rank_of(m: pb.SyncedRank) -> RankSummary:
    if len(m.phases) > limits.MAX_PHASES or len(m.groups) > limits.MAX_GROUPS:
        raise Refused("INVALID_ARGUMENT", f"rank {m.rank}: too many phases or groups")
    return RankSummary(
        rank=m.rank,
        world_size=m.world_size,
        host=m.host,
        pid=m.pid,
        node=m.node,
        reporting=m.reporting,
        ended=m.ended,
        report_age_s=m.report_age_s,
        has_step=m.has_step,
        step=m.step,
        step_age_s=m.step_age_s,
        phases=tuple(m.phases),
        groups=tuple(
            GroupProgress(
                g.group,
                g.issued,
                g.completed,
                g.inflight_age_s if g.in_flight else None,
                g.inflight_op,
                g.inflight_seq,
            )
            for g in m.groups
        ),
        verdict=m.verdict or "OK",
        replica=m.replica,
        ft_wait=m.ft_wait,
        ft_wait_age_s=m.ft_wait_age_s,
        verified=m.verified,
        normal_step_s=m.normal_step_s,
        kernel=m.kernel,
        kernel_age_s=m.kernel_age_s,
    )


def _note_pb(n: EpisodeNote) -> pb.SyncedEpisode:
    return pb.SyncedEpisode(
        id=n.id,
        job_id=n.job_id,
        opened_by=n.opened_by,
        verdict=n.verdict,
        rule=n.rule,
        kind=n.kind,
        culprits=n.culprits,
        text=n.text,
        where=n.where,
    )


def _note_of(m: pb.SyncedEpisode) -> EpisodeNote:
    if len(m.culprits) > limits.MAX_NOTE_RANKS or len(m.where) > limits.MAX_NOTE_RANKS:
        raise Refused("INVALID_ARGUMENT", "an episode note naming too many ranks")
    return EpisodeNote(
        m.id, m.job_id, m.opened_by, m.verdict, m.rule, m.kind, tuple(m.culprits), m.text,
        dict(m.where),
    )  # fmt: skip


def _upload_note(j: pb.JobUpload) -> EpisodeNote | None:
    if j.HasField("note"):
        return _note_of(j.note)
    return replace(_note_of(j.closed_note), closed=True) if j.HasField("closed_note") else None


def upload_pb(up: Upload) -> pb.JobUpload:
    m = pb.JobUpload(
        job_id=up.job_id,
        ranks=[_rank_pb(s) for s in up.ranks],
        dropped=up.dropped,
        full=up.full,
        detail=up.detail,
        ended=up.ended,
        bounded=up.bounded,
    )
    if up.note is not None:
        # A closed note goes in a field of its own: an older upstream, which
        # cannot read it, sees no note (closed), not an episode to hold open.
        (m.closed_note if up.note.closed else m.note).CopyFrom(_note_pb(up.note))
    if up.since is not None:
        m.since_instance, m.since_version = up.since
    return m


def uploads_of(msg: pb.JobSyncUp) -> list[Upload]:
    """A node's message as uploads; :class:`Refused` when it cannot be one."""
    if msg.ByteSize() > limits.MAX_SYNC_MESSAGE_BYTES:
        raise Refused("INVALID_ARGUMENT", f"message over {limits.MAX_SYNC_MESSAGE_BYTES} bytes")
    if len(msg.jobs) > limits.MAX_SYNC_JOBS_PER_NODE:
        raise Refused("RESOURCE_EXHAUSTED", f"over {limits.MAX_SYNC_JOBS_PER_NODE} jobs")
    out = []
    for j in msg.jobs:
        if len(j.ranks) + len(j.dropped) > limits.MAX_SYNC_RANKS_PER_NODE:
            raise Refused("RESOURCE_EXHAUSTED", f"over {limits.MAX_SYNC_RANKS_PER_NODE} ranks")
        since = (j.since_instance, j.since_version) if j.since_instance else None
        out.append(
            Upload(
                j.job_id,
                tuple(_rank_of(r) for r in j.ranks),
                tuple(j.dropped),
                j.full,
                _upload_note(j),
                j.detail,
                since,
                j.ended,
                j.bounded,
            )
        )
    return out


def reply_pb(job_id: str, r: SyncReply) -> pb.JobReply:
    m = pb.JobReply(
        job_id=job_id,
        detail=r.detail,
        full=r.full,
        others=[_held_pb(s, age) for s, age in r.others],
        gone=r.gone,
    )
    if r.episode is not None:
        m.episode.CopyFrom(_note_pb(r.episode))
    if r.digest is not None:
        d = r.digest
        m.digest.CopyFrom(
            pb.SyncedDigest(
                version=d.version,
                ranks=d.ranks,
                world_size=d.world_size,
                reporting=d.reporting,
                min_step=d.min_step,
                max_step=d.max_step,
                suspects=d.suspects,
                suspect_ranks=d.suspect_ranks,
            )
        )
    if r.since is not None:
        m.since_instance, m.since_version = r.since
    if r.verdict is not None:
        m.verdict_json = json.dumps(asdict(r.verdict), default=str)
    return m


def _verdict_of(text: str) -> JobVerdict | None:
    if not text:
        return None
    v = json.loads(text)
    return JobVerdict(
        int(v["version"]), str(v["kind"]), bool(v["healthy"]), tuple(v["culprits"]),
        tuple(v["waiting"]), int(v["culprit_count"]), int(v["waiting_count"]),
        float(v["confidence"]), str(v["summary"]), dict(v["evidence"]), int(v["ranks"]),
    )  # fmt: skip


def reply_of(m: pb.JobReply) -> SyncReply:
    """The upstream's answer (the node trusts its upstream: it authenticated it)."""
    d = m.digest
    digest = (
        JobDigest(
            d.version, d.ranks, d.world_size, d.reporting, d.min_step, d.max_step, d.suspects,
            tuple(d.suspect_ranks),
        )
        if m.HasField("digest")
        else None
    )  # fmt: skip
    return SyncReply(
        tuple((_rank_of(r), r.held_s) for r in m.others),
        _note_of(m.episode) if m.HasField("episode") else None,
        digest,
        detail=m.detail,
        full=m.full,
        gone=tuple(m.gone),
        since=(m.since_instance, m.since_version) if m.since_instance else None,
        verdict=_verdict_of(m.verdict_json),
    )
