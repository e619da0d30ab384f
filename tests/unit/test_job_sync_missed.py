"""Summary mode's upstream when a node's outbox is full: a push it missed is
not taken as told (it is answered again at its next upload)."""

from __future__ import annotations

import asyncio

from tests.unit.test_job_push import stopped, waiting, watched_job
from trainprobe.sidecar.core.job.uplink import Upload
from trainprobe.sidecar.core.job.verdict import ANALYZE_EVERY_S
from trainprobe.sidecar.sync.upstream import OUTBOX, JobSyncUpstream


def test_a_node_that_missed_a_push_is_answered_with_it_at_its_next_upload() -> None:
    up = JobSyncUpstream()
    up.hub = watched_job()
    full: asyncio.Queue[object] = asyncio.Queue(OUTBOX)
    for _ in range(OUTBOX):
        full.put_nowait(b"")
    up._outs["n3"] = full  # type: ignore[assignment]  # n3 reads nothing for a while
    up.hub.apply("n0", [Upload("j", (stopped(0),), detail=True, bounded=True)], 3.0, 1.0)
    up._send(up.hub.tick(0.1 + ANALYZE_EVERY_S))
    assert up.missed_pushes == 1
    # n3 reads again and sends a change: the analysis it missed comes back.
    t = 0.2 + ANALYZE_EVERY_S
    again = Upload("j", (waiting(24, t=t),), detail=True, bounded=True)
    replies, _ = up.hub.apply("n3", [again], 3.0, t)
    assert replies and replies[0][1].verdict is not None
    assert replies[0][1].verdict.culprits == (0,)


def test_a_node_asking_again_and_again_does_not_grow_the_upstreams_memory() -> None:
    """A verdict naming a node's own culprits is built afresh at each ask: the
    replies kept for one analysis must not grow with the node's messages."""
    hub = watched_job()
    t = 0.1 + ANALYZE_EVERY_S
    for n in range(5):  # 40 ranks stop: n4's are culprits past the MAX_NAMED named
        ranks = tuple(stopped(r) for r in range(n * 8, n * 8 + 8))
        hub.apply(f"n{n}", [Upload("j", ranks, detail=True, bounded=True)], 3.0, t)
    t += ANALYZE_EVERY_S
    replies, _ = hub.apply("n4", [Upload("j", detail=True, bounded=True)], 3.0, t)
    assert (v := replies[0][1].verdict) is not None and v.culprit_count == 40 and 39 in v.culprits
    state = hub.jobs["j"]
    analyses = state.analyses
    for i in range(2000):  # all within one analysis (settled: it stands SETTLED_EVERY_S)
        hub.apply("n4", [Upload("j", detail=i % 2 == 0, bounded=True)], 3.0, t + i * 1e-4)
    assert state.analyses == analyses
    assert state._sent is not None and len(state._sent.replies) <= 64


def test_a_node_adds_where_only_its_own_ranks_are_stuck_and_places_stay_bounded() -> None:
    from trainprobe.sidecar.core.job.view import EpisodeNote
    from trainprobe.sidecar.core.limits import MAX_NOTE_RANKS, MAX_NOTE_TEXT

    hub = watched_job()
    note = EpisodeNote("e1", "j", "n0", "HUNG", "stall", culprits=(0,), where={0: "in step()"})
    hub.apply("n0", [Upload("j", note=note, detail=True, bounded=True)], 3.0, 1.0)
    hub.join("evil")
    for k in range(8):  # each message within the note's bounds; together far past them
        places = {r: "x" * MAX_NOTE_TEXT for r in range(k * 256, k * 256 + 256)}
        forged = EpisodeNote("e1", "j", "n0", "HUNG", "stall", where=places)
        hub.apply("evil", [Upload("j", note=forged)], 3.0, 1.1 + k * 0.01)
    ep = hub.jobs["j"].episode
    assert ep is not None and ep.id == "e1"
    assert ep.where[0] == "in step()"  # n0's own rank: not the forger's to place
    assert len(ep.where) <= MAX_NOTE_RANKS
    # A follower places its own culprit.
    mine = EpisodeNote("e1", "j", "n0", "HUNG", "stall", where={8: "in allreduce"})
    hub.apply("n1", [Upload("j", note=mine, detail=True, bounded=True)], 3.0, 1.2)
    ep = hub.jobs["j"].episode
    assert ep is not None and ep.where == {0: "in step()", 8: "in allreduce"}


def test_a_node_flipping_its_rank_does_not_make_a_push_to_every_node_per_message() -> None:
    """Each change of what a job's digest alarms on is pushed to every node of
    the job: a node flipping its rank between HUNG and OK at every message made
    every message cost one push per node (12,500 at the largest)."""
    from trainprobe.sidecar.core.job.hub import SummaryHub
    from trainprobe.sidecar.core.judge.diagnosis import RankSummary

    hub, world = SummaryHub("t"), 8 * 20 + 1
    for n in range(20):
        hub.join(f"n{n}")
        ranks = tuple(RankSummary(r, world) for r in range(n * 8, n * 8 + 8))
        hub.apply(f"n{n}", [Upload("j", ranks, full=True)], 3.0, 0.0)
    hub.join("evil")
    hub.apply("evil", [Upload("j", (RankSummary(160, world),), full=True)], 3.0, 0.0)
    pushed = 0
    for i in range(100):  # 100 messages in a second
        s = RankSummary(160, world, verdict="HUNG" if i % 2 == 0 else "OK")
        pushed += len(hub.apply("evil", [Upload("j", (s,))], 3.0, 1.0 + i / 100)[1])
        pushed += len(hub.tick(1.0 + i / 100))
    assert pushed <= 6 * 20, pushed  # a push to each node at most every quarter second
    # Where it ended (OK, no alarm) reaches every node.
    hub.tick(3.0)
    key = hub._told["j"]
    assert key[2] is False and all(hub._nodes[f"n{n}"].told["j"] == key for n in range(20))
