"""Summary mode during a large job's incident: nodes that hold the upstream's
verdict stop asking at every sync, and the upstream pushes each new analysis
(SummaryHub.tick), on a fake clock."""

from __future__ import annotations

from trainprobe.sidecar.core.job.hub import PUSH_AGAIN_S, SummaryHub
from trainprobe.sidecar.core.job.uplink import ASK_AGAIN_S, HEARTBEAT_S, Uplink, Upload
from trainprobe.sidecar.core.job.verdict import ANALYZE_EVERY_S, MAX_NAMED, SETTLED_EVERY_S
from trainprobe.sidecar.core.judge.diagnosis import GroupProgress, RankSummary

WORLD = 96  # 12 nodes of 8: more other ranks than a node is sent whole (MAX_SENT)


def waiting(r: int, world: int = WORLD, t: float = 0.0) -> RankSummary:
    """A rank blocked since 2 s before ``t`` in the allreduce its stopped peer never joins."""
    return RankSummary(
        r, world, host=f"h{r // 8}", pid=100 + r, has_step=True, step=50, step_age_s=2.0 + t,
        report_age_s=0.1, verified=True, normal_step_s=0.2,
        groups=(GroupProgress("default", 101, 100, 2.0 + t, "allreduce", 101),),
    )  # fmt: skip


def stopped(r: int, world: int = WORLD) -> RankSummary:
    return RankSummary(
        r, world, host=f"h{r // 8}", pid=100 + r, reporting=False, report_age_s=2.0,
        has_step=True, step=50, step_age_s=2.0, verdict="UNRESPONSIVE", verified=True,
        normal_step_s=0.2, kernel="stopped", kernel_age_s=0.1,
        groups=(GroupProgress("default", 100, 100),),
    )  # fmt: skip


def watched_job(world: int = WORLD) -> SummaryHub:
    """Every node uploaded its waiting ranks and asked for the details once."""
    hub = SummaryHub("t")
    for n in range(world // 8):
        hub.join(f"n{n}")
        ranks = tuple(waiting(r, world) for r in range(n * 8, n * 8 + 8))
        hub.apply(f"n{n}", [Upload("j", ranks, full=True)], 3.0, 0.0)
    for n in range(world // 8):
        replies, _ = hub.apply(f"n{n}", [Upload("j", detail=True, bounded=True)], 3.0, 0.1)
        assert replies[0][1].verdict is not None  # a large job: the upstream's verdict
    return hub


def test_a_node_holding_a_large_jobs_verdict_sends_only_changes_not_a_poll_each_sync() -> None:
    up = Uplink(refresh_s=3.0)

    def ranks(t: float) -> list[RankSummary]:
        return [waiting(0, t=t), waiting(1, t=t)]

    assert up.uploads({"j": (ranks(0.0), None, False, None)}, 0.0, True)[0].full
    # Asking for details of a job whose verdict is not held yet: asked at each sync
    # once answered; unanswered (a busy upstream), not again until ASK_AGAIN_S.
    assert up.uploads({"j": (ranks(0.5), None, True, None)}, 0.5, True)[0].detail
    assert up.uploads({"j": (ranks(0.8), None, True, None)}, 0.8, True) == []
    up.answered("j")
    assert up.uploads({"j": (ranks(1.0), None, True, None)}, 1.0, True)[0].detail
    assert up.uploads({"j": (ranks(1.2), None, True, None)}, 1.2, True) == []
    assert up.uploads({"j": (ranks(1.0 + ASK_AGAIN_S), None, True, None)}, 1.0 + ASK_AGAIN_S,
                      True)[0].detail  # fmt: skip
    up.answered("j")
    # Held (the upstream pushes each new analysis): nothing new, nothing sent ...
    assert up.uploads({"j": (ranks(1.5), None, True, None)}, 1.5, True, ["j"]) == []
    assert up.uploads({"j": (ranks(2.0), None, True, None)}, 2.0, True, ["j"]) == []
    # ... a change goes at once ...
    now_stopped = [stopped(0), waiting(1, t=2.5)]
    sent = up.uploads({"j": (now_stopped, None, True, None)}, 2.5, True, ["j"])
    assert [s.rank for s in sent[0].ranks] == [0]
    # ... and so does the end of the asking, which ends the pushes.
    done = up.uploads({"j": (now_stopped, None, False, None)}, 3.0, True, ["j"])
    assert len(done) == 1 and not done[0].detail and done[0].ranks == ()
    assert up.uploads({"j": (now_stopped, None, False, None)}, 3.5, True) == []
    assert up.uploads({"j": (now_stopped, None, False, None)}, 3.5 + HEARTBEAT_S, True)


def test_the_upstream_pushes_each_new_analysis_to_the_nodes_that_hold_the_verdict() -> None:
    hub = watched_job()
    hub.apply("n0", [Upload("j", (stopped(0),), detail=True, bounded=True)], 3.0, 1.0)
    analyses = hub.jobs["j"].analyses
    assert hub.tick(1.05) == []  # analysed at 0.1: not again within ANALYZE_EVERY_S
    pushes = hub.tick(0.1 + ANALYZE_EVERY_S)
    assert hub.jobs["j"].analyses == analyses + 1
    assert sorted(n for n, _, _ in pushes) == sorted(f"n{n}" for n in range(12))
    verdicts = {n: r.verdict for n, _, r in pushes}
    assert all(v is not None and v.culprits == (0,) for v in verdicts.values())
    assert all(v is not None and v.waiting_count == WORLD - 1 for v in verdicts.values())
    # Every node whose ranks only wait gets one reply object: encoded once for all.
    assert len({id(r) for n, _, r in pushes if n != "n0"}) == 1
    assert all(0 in [s.rank for s, _ in r.others] for _, _, r in pushes)
    # Settled (a culprit named) and nothing changed: no analysis until SETTLED_EVERY_S.
    t = 0.1 + ANALYZE_EVERY_S
    assert hub.tick(t + ANALYZE_EVERY_S) == [] and hub.jobs["j"].analyses == analyses + 1
    # Analysed again then; it says what the last push said: pushed again only later.
    assert hub.tick(t + SETTLED_EVERY_S) == [] and hub.jobs["j"].analyses == analyses + 2
    assert hub.tick(t + PUSH_AGAIN_S) and hub.jobs["j"].analyses == analyses + 3
    # A node that stops asking gets no more pushes.
    t += PUSH_AGAIN_S
    hub.apply("n5", [Upload("j")], 3.0, t + 0.1)
    back = (waiting(0, t=t),)
    hub.apply("n0", [Upload("j", back, detail=True, bounded=True)], 3.0, t + 0.2)
    later = hub.tick(t + 0.2 + ANALYZE_EVERY_S)
    assert later and "n5" not in {n for n, _, _ in later}


def test_a_node_whose_own_ranks_are_culprits_past_the_named_ones_is_told_so() -> None:
    world = 8 * 12
    hub = watched_job(world)
    culprit_nodes = range(5)  # 40 ranks stop: more culprits than a verdict names
    for n in culprit_nodes:
        ranks = tuple(stopped(r, world) for r in range(n * 8, n * 8 + 8))
        hub.apply(f"n{n}", [Upload("j", ranks, detail=True, bounded=True)], 3.0, 1.0)
    pushes = {n: r.verdict for n, _, r in hub.tick(0.1 + ANALYZE_EVERY_S)}
    assert all(v is not None and v.culprit_count == 40 for v in pushes.values())
    own = pushes["n4"]
    assert own is not None and set(range(32, 40)) <= set(own.culprits)
    other = pushes["n7"]
    assert other is not None and len(other.culprits) == MAX_NAMED


def test_an_analysis_run_for_a_node_that_asked_is_pushed_to_the_others_too() -> None:
    hub = watched_job()
    t = 0.1 + ANALYZE_EVERY_S
    # n11 holds no verdict yet (a new stream): its ask runs the analysis ...
    hub.apply("n11", [Upload("j", detail=True, bounded=True)], 3.0, t - 0.5)
    hub.apply("n0", [Upload("j", (stopped(0),), detail=True, bounded=True)], 3.0, t - 0.4)
    replies, _ = hub.apply("n11", [Upload("j", detail=True, bounded=True)], 3.0, t)
    assert replies and replies[0][1].verdict is not None and replies[0][1].verdict.culprits == (0,)
    # ... and the tick right after (no new analysis due) still pushes it to the rest.
    pushes = hub.tick(t + 0.25)
    assert {n for n, _, _ in pushes} >= {f"n{n}" for n in range(1, 11)}
    assert all(r.verdict is not None and r.verdict.culprits == (0,) for _, _, r in pushes)


def test_a_node_holding_the_verdict_sends_a_healthy_rank_again_only_every_heartbeat() -> None:
    up = Uplink(refresh_s=3.0)

    def ranks(t: float) -> list[RankSummary]:
        return [waiting(0, t=t), waiting(1, t=t)]  # reporting, a fresh report each time

    up.uploads({"j": (ranks(0.0), None, True, None)}, 0.0, True)
    # Polling (no verdict held yet), a fresh report goes once the held one is refresh_s old.
    assert up.uploads({"j": (ranks(3.5), None, True, None)}, 3.5, True)[0].ranks
    # Holding the verdict: the same rank goes again only after a heartbeat.
    assert up.uploads({"j": (ranks(7.0), None, True, None)}, 7.0, True, ["j"]) == []
    again = up.uploads({"j": (ranks(3.5 + HEARTBEAT_S), None, True, None)}, 3.5 + HEARTBEAT_S,
                       True, ["j"])  # fmt: skip
    assert [s.rank for s in again[0].ranks] == [0, 1]


def test_the_upstream_takes_a_rank_not_sent_again_within_a_heartbeat_as_still_reporting() -> None:
    hub = watched_job()
    assert hub.jobs["j"].vouched_s == HEARTBEAT_S
    # Nodes that hold the verdict send nothing new; only a heartbeat each, which
    # must not make their ranks' summaries newer than they are.
    verdicts = []
    for n in range(12):
        replies, _ = hub.apply(f"n{n}", [Upload("j", detail=True, bounded=True)], 3.0, 9.0)
        verdicts += [r.verdict for _, r in replies]
    assert all(t == 0.0 for _, t in hub.jobs["j"].store.latest()), "aged from when taken"
    assert verdicts and all(v is not None and v.kind != "unresponsive" for v in verdicts)
    # Silent past a heartbeat and the refresh limit: no longer taken as reporting.
    late = hub.tick(12.0 + HEARTBEAT_S + 10.0)
    assert late and all(r.verdict is not None and r.verdict.kind == "unresponsive"
                        for _, _, r in late)  # fmt: skip


def test_a_large_job_is_analysed_at_most_as_often_as_one_core_affords() -> None:
    from trainprobe.sidecar.core.job.verdict import ANALYZED_RANKS_PER_S, analyse_every_s

    assert analyse_every_s(WORLD) == ANALYZE_EVERY_S
    assert analyse_every_s(100_000) == 100_000 / ANALYZED_RANKS_PER_S == 2.0
    # 2 s between passes still names a culprit within 5 s of its upload.
    assert analyse_every_s(100_000) + 0.25 < 5.0


def test_a_large_jobs_alarm_carries_its_verdict_so_no_node_has_to_ask() -> None:
    """At 12,500 nodes, each node asking after the alarm put 12,500 asks in the
    upstream's queue, and the culprit reached a node only when its ask came
    round. The alarm now carries the job's verdict to every node of a large
    job; the ask each then sends is not answered again."""
    from tests.unit.test_jobsync_delta import rank

    hub = SummaryHub("t")
    for n in range(WORLD // 8):
        hub.join(f"n{n}")
        ranks = tuple(rank(r, WORLD) for r in range(n * 8, n * 8 + 8))
        hub.apply(f"n{n}", [Upload("j", ranks, full=True)], 3.0, 0.0)
    hub.tick(0.5)  # the first digests, held back at the start
    _, pushes = hub.apply("n0", [Upload("j", (stopped(0),))], 3.0, 1.0)
    assert sorted(n for n, _, _ in pushes) == sorted(f"n{n}" for n in range(1, WORLD // 8))
    verdicts = [r.verdict for _, _, r in pushes]
    assert all(v is not None and v.culprits == (0,) for v in verdicts)
    assert len({id(r) for _, _, r in pushes}) == 1  # one reply object, encoded once
    replies, _ = hub.apply("n5", [Upload("j", detail=True, bounded=True)], 3.0, 1.3)
    assert replies == []
    # Each holds the verdict: the next analysis that says something new reaches it.
    moved = tuple(stopped(r) for r in range(8, 16))
    hub.apply("n1", [Upload("j", moved, detail=True, bounded=True)], 3.0, 1.0 + SETTLED_EVERY_S)
    later = hub.tick(1.0 + SETTLED_EVERY_S + ANALYZE_EVERY_S)
    assert {n for n, _, _ in later} >= {f"n{n}" for n in range(2, WORLD // 8)}


def test_a_node_of_a_large_job_waits_for_the_push_instead_of_polling_for_the_verdict() -> None:
    """At 12,500 nodes on the 16-core machine the upstream fell behind in an
    incident; nodes that did not hold its verdict yet resent every reporting
    rank each refresh (3 s) and asked again every ASK_AGAIN_S: 6,000 messages
    a second, which kept it behind. A node whose job the upstream judges itself
    (more than MAX_SENT other ranks, by the digest) sends its flip to details
    once, then only changes and heartbeats, verdict or not."""
    from trainprobe.sidecar.core.job.digest import JobDigest
    from trainprobe.sidecar.core.job.view import JobView, SyncReply

    def told(ranks: int) -> JobView:
        view = JobView()
        digest = JobDigest(1, ranks, ranks, ranks, 50, 50, 1, (0,))
        view.update("j", SyncReply((), None, digest, detail=False, full=False), 0.0)
        return view

    assert told(WORLD).judged_upstream("j", 8)  # 88 other ranks
    assert not told(72).judged_upstream("j", 8)  # 64: sent whole, judged by each node
    assert not JobView().judged_upstream("j", 8)
    view, up = told(WORLD), Uplink(refresh_s=3.0)
    mine = [waiting(8, t=0.0), waiting(9, t=0.0)]
    up.uploads({"j": (mine, None, False, None)}, 0.0, True)
    sent = []
    for i in range(1, 20):  # 9.5 s of syncs, every 0.5 s, no answer
        t = i * 0.5
        mine = [waiting(8, t=t), waiting(9, t=t)]
        pushed = ["j"] if view.judged_upstream("j", len(mine)) else []
        sent += up.uploads({"j": (mine, None, True, None)}, t, True, pushed)
    assert len(sent) == 1 and sent[0].detail  # the flip, then nothing until the heartbeat
