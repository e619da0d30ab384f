"""Summary mode's pure halves: what a node sends (Uplink) and what the
upstream takes, refuses and answers (SummaryHub), on a fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainprobe.sidecar.core import limits
from trainprobe.sidecar.core.job.hub import Refused, SummaryHub
from trainprobe.sidecar.core.job.uplink import HEARTBEAT_S, Uplink, Upload
from trainprobe.sidecar.core.job.view import EpisodeNote
from trainprobe.sidecar.core.judge.diagnosis import RankSummary


def rank(r: int, **kw: object) -> RankSummary:
    # No step age: what ages between uploads is only the report (fresh every round here).
    base = RankSummary(r, 2, host="h", pid=100 + r, step=5, verified=True)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_uplink_sends_all_first_then_what_matters_and_every_change_while_detailed() -> None:
    up = Uplink(refresh_s=3.0)

    def rnd(r0: RankSummary, r1: RankSummary, detail: bool = False) -> dict:
        return {"j": ([r0, r1], None, detail, None)}

    first = up.uploads(rnd(rank(0), rank(1)), 0.0)
    assert [(u.full, len(u.ranks)) for u in first] == [(True, 2)]
    assert up.uploads(rnd(rank(0), rank(1)), 0.5) == []
    # A healthy job: a step is no news to the upstream ...
    assert up.uploads(rnd(rank(0), rank(1, step=6)), 1.0) == []
    # ... a rank turning suspect is, at once.
    hung = up.uploads(rnd(rank(0), rank(1, step=6, verdict="HUNG")), 1.5)
    assert [s.rank for s in hung[0].ranks] == [1] and not hung[0].full
    # While details are wanted every change goes, steps included, and each round asks
    # once the last ask was answered.
    detailed = up.uploads(rnd(rank(0, step=7), rank(1, step=6, verdict="HUNG"), True), 2.0)
    assert [s.rank for s in detailed[0].ranks] == [0] and detailed[0].detail
    up.answered("j")
    assert up.uploads(rnd(rank(0, step=7), rank(1, step=6, verdict="HUNG"), True), 2.5)[0].detail
    # Healthy again: every rank goes again once a heartbeat has passed.
    late = up.uploads(rnd(rank(0, step=9), rank(1, step=9)), 2.5 + HEARTBEAT_S)
    assert [s.rank for s in late[0].ranks] == [0, 1]
    gone = up.uploads({}, 20.0)
    assert gone == [Upload("j", ended=True)]


def test_hub_answers_with_the_others_and_pushes_an_alarm_to_every_node() -> None:
    hub = SummaryHub("t")
    hub.join("a")
    hub.join("b")
    hub.apply("a", [Upload("j", (rank(0),), full=True)], 3.0, 0.0)
    _, pushes = hub.apply("b", [Upload("j", (rank(1),), full=True)], 3.0, 0.1)
    hub.tick(0.5)  # the upstream's tick: a change within DIGEST_PUSH_EVERY_S goes with it
    # Rank 1 turns suspect at node b: node a, holding only the digest, is told at once.
    _, pushes = hub.apply("b", [Upload("j", (rank(1, reporting=False),))], 3.0, 1.0)
    assert [(n, j) for n, j, _ in pushes] == [("a", "j")]
    assert pushes[0][2].digest is not None and pushes[0][2].digest.suspects == 1
    replies, _ = hub.apply("a", [Upload("j", detail=True)], 3.0, 1.2)
    ((job, reply),) = replies
    assert job == "j" and [s.rank for s, _ in reply.others] == [1]
    assert reply.others[0][0].reporting is False


def test_hub_refuses_what_a_hostile_node_sends_and_keeps_the_rest() -> None:
    hub = SummaryHub("t")
    hub.join("a")
    hub.join("evil")
    hub.apply("a", [Upload("j", (rank(0),), full=True)], 3.0, 0.0)
    with pytest.raises(Refused) as err:
        hub.join("a")
    assert err.value.code == "ALREADY_EXISTS"
    # Another node's rank, forged as hung: refused, the honest summary stays.
    forged = rank(0, verdict="HUNG", reporting=False, host="x\x1b[2J")
    with pytest.raises(Refused) as err:
        hub.apply("evil", [Upload("j", (forged,))], 3.0, 0.5)
    assert err.value.code == "PERMISSION_DENIED" and "rank 0 of job j" in err.value.details
    held = hub.jobs["j"].store.full("someone", 0.5)
    assert [s.verdict for s, _ in held] == ["OK"]
    bad = [
        rank(1, host="h" * (limits.MAX_ID_LEN + 1)),
        rank(1, world_size=0),
        rank(1, verdict="EVIL"),
        rank(1, report_age_s=float("nan")),
        rank(1, phases=("p",) * (limits.MAX_PHASES + 1)),
    ]
    for s in bad:
        with pytest.raises(Refused) as err:
            hub.apply("evil", [Upload("j", (s,))], 3.0, 0.6)
        assert err.value.code == "INVALID_ARGUMENT"
    many = tuple(RankSummary(r, 4096) for r in range(limits.MAX_SYNC_RANKS_PER_NODE + 1))
    with pytest.raises(Refused) as err:
        hub.apply("evil", [Upload("k", many, full=True)], 3.0, 0.7)
    assert err.value.code == "RESOURCE_EXHAUSTED"
    note = EpisodeNote("e", "other-job", "evil", "HUNG", "stall", culprits=(0,))
    with pytest.raises(Refused):
        hub.apply("evil", [Upload("j", note=note)], 3.0, 0.8)
    assert "k" not in hub.jobs and hub.ranks() == 1
    # Its stream ends: it leaves; the honest node's rank is still held.
    hub.leave("evil")
    assert hub.ranks() == 1 and len(hub) == 1


def test_the_wire_carries_summaries_notes_and_a_bounded_verdict_whole() -> None:
    from trainprobe.proto import probe_pb2 as pb
    from trainprobe.sidecar.core.job.verdict import JobVerdict
    from trainprobe.sidecar.core.job.view import SyncReply
    from trainprobe.sidecar.core.judge.diagnosis import GroupProgress
    from trainprobe.sidecar.sync.wire import reply_of, reply_pb, upload_pb, uploads_of

    s = rank(3, groups=(GroupProgress("g", 5, 4, 1.5, "allreduce", 5),), phases=("ckpt",))
    note = EpisodeNote("e1", "j", "a", "HUNG", "stall", "straggler", (3,), "t", {3: "x.py:1"})
    up = Upload("j", (s,), (1,), True, note, True, ("i", 7), bounded=True)
    msg = pb.JobSyncUp(node_id="a", refresh_s=3, jobs=[upload_pb(up)])
    assert uploads_of(pb.JobSyncUp.FromString(msg.SerializeToString())) == [up]
    verdict = JobVerdict(9, "straggler", False, (3,), (0, 1), 1, 700, 0.95, "s", {"k": [1]}, 800)
    reply = SyncReply(((s, 0.25),), note, None, gone=(2,), since=("i", 9), verdict=verdict)
    back = reply_of(pb.JobReply.FromString(reply_pb("j", reply).SerializeToString()))
    assert back == reply
    # A held summary is encoded once for every node it goes to; each gets its own age,
    # and a summary changed since is encoded anew.
    older = replace(reply, others=((s, 1.75), (replace(s, step=9), 0.5)))
    back = reply_of(pb.JobReply.FromString(reply_pb("j", older).SerializeToString()))
    assert back == older
    # A closed note travels in a field of its own: an upstream that reads only
    # `note` (an older one) sees no note, which means closed, not an open episode.
    ended = Upload("j", note=replace(note, closed=True))
    m = pb.JobUpload.FromString(upload_pb(ended).SerializeToString())
    assert not m.HasField("note") and m.closed_note.id == "e1"
    assert uploads_of(pb.JobSyncUp(node_id="a", jobs=[m])) == [ended]


def test_a_node_polling_for_details_gets_a_large_jobs_verdict_once_per_analysis() -> None:
    from trainprobe.sidecar.core.job.verdict import MAX_SENT, SETTLED_EVERY_S

    hub = SummaryHub("t")
    world = MAX_SENT + 16  # more other ranks than a node is sent whole
    for n in range(world // 8):
        hub.join(f"n{n}")
        ranks = tuple(RankSummary(r, world, host=f"h{n}", pid=100 + r, step=5, verified=True)
                      for r in range(n * 8, n * 8 + 8))  # fmt: skip
        hub.apply(f"n{n}", [Upload("j", ranks, full=True)], 3.0, 0.0)
    stopped = RankSummary(0, world, host="h0", pid=100, reporting=False, verdict="UNRESPONSIVE")
    _, alarm = hub.apply("n0", [Upload("j", (stopped,))], 3.0, 1.0)
    # Each node's view is the whole job's verdict: it costs the upstream one encoded
    # answer of up to MAX_SENT summaries each. Polled twice a second by every node
    # of a 12,500-node job, the same verdict again was most of an incident's CPU.
    # The alarm brought it; the node's asks that follow get nothing again.
    first = {n: r.verdict for n, _, r in alarm}["n1"]
    assert first is not None and 0 in first.culprits
    asked, _ = hub.apply("n1", [Upload("j", detail=True, bounded=True)], 3.0, 1.1)
    again, _ = hub.apply("n1", [Upload("j", detail=True, bounded=True)], 3.0, 1.6)
    assert asked == again == []
    # A new analysis (or an episode, a suspect count crossing zero) is answered; with
    # a culprit named and no rank doing anything new, that is every SETTLED_EVERY_S.
    later, _ = hub.apply("n1", [Upload("j", detail=True, bounded=True)], 3.0, 1.2 + SETTLED_EVERY_S)
    assert later and later[0][1].verdict is not None
    # A node that stops asking and asks again gets the verdict again.
    hub.apply("n1", [Upload("j")], 3.0, 3.0)
    back, _ = hub.apply("n1", [Upload("j", detail=True, bounded=True)], 3.0, 3.1)
    assert back and back[0][1].verdict is not None
