"""The coordinator's verdict on a job too large to send whole: bounded answers, same verdicts.

Pure: the coordinator's state and a sidecar's view stepped by hand on a fake
clock, the job's ranks as their sidecars would summarise them.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

from tests.unit.test_jobsync_delta import WORLD_PER_NODE, rank
from trainprobe.sidecar.core.hang.pause import pause_check, remote_evidence
from trainprobe.sidecar.core.job.verdict import (
    ANALYZE_EVERY_S,
    MAX_NAMED,
    MAX_SENT,
    SETTLED_EVERY_S,
)
from trainprobe.sidecar.core.job.view import (
    CoordinatorState,
    JobView,
    SyncReply,
    analyze_job,
    merge_summaries,
)
from trainprobe.sidecar.core.judge.culprit import STRAGGLER, UNRESPONSIVE, RankSummary

T = 1000.0


def hung(nodes: int, culprit: int = 3, silent: frozenset[int] = frozenset(), **kw: object):  # type: ignore[no-untyped-def]
    """Every node's ranks: ``culprit`` stopped stepping outside any collective,
    the others wait for it in an allreduce (HUNG); ``silent`` ranks stopped reporting."""
    world = nodes * WORLD_PER_NODE

    def one(r: int) -> RankSummary:
        if r in silent:
            return rank(r, world, step_age_s=6.0, report_age_s=6.0, reporting=False, **kw)
        if r == culprit:
            return rank(r, world, step_age_s=6.0)
        return rank(r, world, inflight=5.0, step_age_s=6.0, verdict="HUNG", **kw)

    return [[one(n * WORLD_PER_NODE + i) for i in range(WORLD_PER_NODE)] for n in range(nodes)]


def coordinator(by_node: list[list[RankSummary]]) -> CoordinatorState:
    c = CoordinatorState(instance="c1")
    for n, ranks in enumerate(by_node):
        c.sync(f"s{n}", ranks, None, T + n * 1e-6, detail=False)
    return c


def asked(
    c: CoordinatorState, by_node: list[list[RankSummary]], n: int
) -> tuple[SyncReply, JobView]:
    view = JobView()
    reply = c.sync(f"s{n}", by_node[n], None, T + 0.1, detail=True, bounded=True)
    view.update("job", reply, T + 0.1)
    return reply, view


def seen_by(view: JobView, mine: list[RankSummary]) -> list[RankSummary]:
    return merge_summaries(mine, view.remote("job", T + 0.1, 10.0))


def test_an_incidents_answer_does_not_grow_with_the_nodes_and_names_the_same_culprit() -> None:
    sizes = {}
    for nodes in (10, 1250):
        by_node = hung(nodes)
        c = coordinator(by_node)
        everyone = [s for ranks in by_node for s in ranks]
        # The coordinator reads each rank's latest upload as is (a sync old at most).
        truth = analyze_job(everyone)
        reply, view = asked(c, by_node, nodes - 1)
        assert reply.verdict is not None and len(reply.others) <= MAX_SENT
        sizes[nodes] = len(pickle.dumps(reply))
        diag = analyze_job(seen_by(view, by_node[-1]), view.verdict("job"))
        assert (diag.kind, diag.culprits) == (truth.kind, truth.culprits) == (STRAGGLER, (3,))
        assert diag.summary == truth.summary and diag.confidence == truth.confidence
        # Waiting: counted, MAX_NAMED named; the asker's own are named only where it
        # acts on them (a mismatch, a replica: tests below), else its evidence has them.
        assert reply.verdict.waiting_count == len(truth.waiting)
        assert len(diag.waiting) <= MAX_NAMED
        assert diag.evidence.get("waiting_count", len(diag.waiting)) == len(truth.waiting)
        assert 3 in {s.rank for s, _ in reply.others}  # the culprit comes whole
    assert sizes[1250] <= 1.5 * sizes[10] and sizes[1250] < 16 * 1024, sizes


def test_a_job_whose_other_ranks_fit_is_sent_whole_and_judged_by_the_sidecar() -> None:
    by_node = hung(MAX_SENT // WORLD_PER_NODE)
    reply, view = asked(coordinator(by_node), by_node, 0)
    assert reply.verdict is None and view.verdict("job") is None
    assert len(reply.others) == MAX_SENT - WORLD_PER_NODE and reply.since is not None


def test_a_sidecars_own_culprits_are_named_however_many_there_are() -> None:
    """200 silent ranks, the asker's among the last: it is told they are culprits
    (it kills its own), the rest are counted."""
    nodes = 1250
    silent = frozenset(range(8000, 8200))
    by_node = hung(nodes, silent=silent)
    everyone = [s for ranks in by_node for s in ranks]
    truth = analyze_job(everyone)
    assert truth.kind == UNRESPONSIVE and len(truth.culprits) == 200
    asker = 8192 // WORLD_PER_NODE  # ranks 8192..8199: silent, past the first MAX_NAMED
    reply, view = asked(coordinator(by_node), by_node, asker)
    verdict = reply.verdict
    assert verdict is not None and verdict.culprit_count == 200
    assert analyze_job(seen_by(view, by_node[asker]), view.verdict("job")).kind == UNRESPONSIVE
    assert (
        set(range(8192, 8200)) <= set(verdict.culprits) and len(verdict.culprits) <= MAX_NAMED + 8
    )
    assert set(verdict.culprits) <= set(truth.culprits)
    assert len(verdict.evidence["missing"]) == 0  # type: ignore[arg-type]
    assert len(pickle.dumps(reply)) < 24 * 1024


def test_a_whole_job_held_is_a_pause_on_the_sample_as_on_every_rank() -> None:
    """A pause needs every live rank held: judged on the ranks a bounded answer
    carries, it reads as on all of them, and one rank anywhere that still
    reports, or whose word is still on its way, keeps it from being one."""
    nodes = 250
    world = nodes * WORLD_PER_NODE

    def stopped(r: int, **kw: object) -> RankSummary:
        fields: dict[str, object] = {
            "reporting": False,
            "report_age_s": 4.0,
            "kernel": "stopped",
            "kernel_age_s": 0.5,
        }
        fields.update(kw)
        return rank(r, world, **fields)

    cases = {
        "paused": {},
        "one reports": {1500: {"reporting": True, "report_age_s": 0.2, "kernel": ""}},
        "one word on its way": {1801: {"kernel": "", "report_age_s": 1.0}},
    }
    for name, odd in cases.items():
        by_node = [
            [stopped(r, **odd.get(r, {})) for r in range(n * 8, n * 8 + 8)] for n in range(nodes)
        ]
        everyone = [s for ranks in by_node for s in ranks]
        _, view = asked(coordinator(by_node), by_node, 0)
        sample = view.remote("job", T + 0.1, 10.0)
        assert len(sample) <= MAX_SENT
        got = []
        for ranks in (everyone[8:], sample):
            evidence, awaiting = remote_evidence(ranks, T + 0.1, 12.0)
            reason, pending = pause_check(evidence, ranks, awaiting)
            got.append((bool(reason), bool(pending)))
        assert got[0] == got[1], name
        assert got[0] == {"paused": (True, False), "one reports": (False, False)}.get(
            name, (False, True)
        )


def test_the_ranks_of_a_sidecar_that_stopped_syncing_turn_silent_in_the_verdict() -> None:
    """Latest uploads are read as they are; a node whose sidecar went quiet is
    aged, and past the heartbeat limit its ranks are the job's culprits."""
    nodes = 20
    world = nodes * WORLD_PER_NODE
    by_node = [[rank(r, world) for r in range(n * 8, n * 8 + 8)] for n in range(nodes)]
    c = coordinator(by_node)
    for now in (T + 5.0, T + 10.0):
        for n in range(1, nodes):  # node 0's sidecar is gone
            c.sync(f"s{n}", by_node[n], None, now, detail=True, bounded=True)
        verdict = c.sync("s1", by_node[1], None, now + 1.1, detail=True, bounded=True).verdict
        assert verdict is not None and verdict.healthy == (now < T + 9.0)
    assert verdict.kind == UNRESPONSIVE and verdict.culprits == tuple(range(8))


def test_the_coordinator_analyses_a_large_job_at_most_once_a_second() -> None:
    by_node = hung(100)
    c = coordinator(by_node)
    for i in range(300):
        now = T + 0.1 + i * 0.003  # 300 syncs in 0.9 s
        c.sync(f"s{i % 100}", by_node[i % 100], None, now, detail=True, bounded=True)
    assert c.analyses == 1
    # A culprit named and no rank doing anything new: the same analysis stands ...
    c.sync("s0", by_node[0], None, T + 0.1 + ANALYZE_EVERY_S, detail=True, bounded=True)
    assert c.analyses == 1
    c.sync("s0", by_node[0], None, T + 0.1 + SETTLED_EVERY_S, detail=True, bounded=True)
    assert c.analyses == 2
    # ... while a rank that does something new is read within ANALYZE_EVERY_S.
    moved = [replace(by_node[5][0], step=by_node[5][0].step + 1), *by_node[5][1:]]
    at = T + 0.1 + SETTLED_EVERY_S + ANALYZE_EVERY_S
    c.sync("s5", moved, None, at, detail=True, bounded=True)
    assert c.analyses == 3
    # A healthy job's sidecars ask for no detail: no analysis at all.
    quiet = coordinator(by_node)
    quiet.sync("s0", by_node[0], None, T + 5, detail=False, bounded=True)
    assert quiet.analyses == 0


def test_another_sidecars_episode_in_a_large_job_is_followed_on_the_coordinators_verdict() -> None:
    """80 ranks on 10 nodes: this sidecar holds only the ranks the verdict names,
    and acts on its own culprit as it would holding all 80."""
    from tests.core_builders import connected, report
    from tests.unit.test_engine import seq
    from tests.unit.test_hang_machine import RULES, tick
    from trainprobe.sidecar.core.hang import CulpritPolicy, HangConfig, HangState, PatienceBook
    from trainprobe.sidecar.core.hang.effects import Inspect
    from trainprobe.sidecar.core.hang.state import diagnose
    from trainprobe.sidecar.core.incident import ActionPolicy
    from trainprobe.sidecar.core.job import EpisodeNote
    from trainprobe.sidecar.core.judge import summarize
    from trainprobe.sidecar.core.session import Registry

    t0, world = 100.0, 80
    config = HangConfig(RULES, ActionPolicy(), CulpritPolicy(), "here", reads_stacks=True)
    view = JobView()
    state, reg = HangState.new(config, PatienceBook(setting_s=0.0), view), Registry()
    mine = connected(reg, 1, t0, world=world)
    reg.apply(mine, report(t0 + 4.5, step=7, step_t_s=t0 + 2, sync=seq(7, 7)), t0 + 4.5)
    others = [r for r in range(world) if r != 1]
    waiting = [rank(r, world, step=7, inflight=2.5, step_age_s=2.5, verdict="HUNG") for r in others]
    note = EpisodeNote("ep-1", "job", "there", "HUNG", "stall", culprits=(1,))
    c = CoordinatorState(instance="c1")
    for n in range(0, len(waiting), WORLD_PER_NODE):
        sid = "there" if n == 0 else f"s{n}"  # the episode's opener
        c.sync(sid, waiting[n : n + WORLD_PER_NODE], note if n == 0 else None, t0 + 4.5)
    here = [summarize(mine, t0 + 4.6, 10.0)]
    reply = c.sync("here", here, None, t0 + 4.6, detail=True, bounded=True)
    view.update("job", reply, t0 + 4.6)
    assert reply.verdict is not None and len(view.remote("job", t0 + 4.6, 10.0)) <= MAX_SENT
    assert reply.verdict.culprits == (1,) and reply.verdict.waiting_count == world - 1
    (inspect,) = [e for e in tick(state, reg, t0 + 4.6) if isinstance(e, Inspect)]
    assert inspect.incident.targets == [1]
    diag, _ = diagnose(state, reg.workers(), "job", t0 + 4.6)
    assert diag.culprits == (1,) and diag.kind == STRAGGLER


def test_a_replicated_jobs_culprit_replica_is_the_same_on_the_verdict_and_on_every_rank() -> None:
    """100 torchft replicas of 8 ranks: rank 56 of replica_7 stopped stepping
    outside torchft, everyone else waits in the quorum. The sidecar serving
    replica_7 and one serving a waiting replica see it as on every rank."""
    from trainprobe.sidecar.core.judge.replicas import apply_replicas, replica_evidence

    nodes, world = 100, 800

    def one(r: int) -> RankSummary:
        kw: dict[str, object] = {"replica": f"replica_{r // 8}", "step_age_s": 6.0}
        if r == 56:
            return rank(r, world, **kw)
        return rank(r, world, ft_wait="quorum", verdict="HUNG", **kw)

    by_node = [[one(r) for r in range(n * 8, n * 8 + 8)] for n in range(nodes)]
    everyone = [s for ranks in by_node for s in ranks]
    truth = analyze_job(everyone)
    assert truth.culprits == (56,)
    assert replica_evidence(truth.evidence).culprits == ("replica_7",)  # type: ignore[union-attr]
    c = coordinator(by_node)
    for asker in (7, 42):
        reply, view = asked(c, by_node, asker)
        assert reply.verdict is not None and len(reply.others) <= MAX_SENT
        ranks = seen_by(view, by_node[asker])
        # As an evidence round does: the verdict, then the replicas again on what is held.
        diag = apply_replicas(ranks, analyze_job(ranks, view.verdict("job")))
        rep = replica_evidence(diag.evidence)
        assert diag.culprits == (56,) and rep is not None and rep.culprits == ("replica_7",)
        mine = set(range(asker * 8, asker * 8 + 8))
        assert f"replica_{asker}" in rep.groups and (asker == 7 or mine <= rep.waiting_ranks)
        if asker == 7:
            assert rep.ranks_of(rep.culprits) == sorted(mine)  # the group evicted whole
        assert len(pickle.dumps(reply)) < 16 * 1024


def test_an_analysis_pass_runs_without_the_cyclic_collector_and_restores_it() -> None:
    """A pass over a large job makes a few new objects per rank (the aged
    copies), all freed by reference counting when it ends. The collector
    counts each one and, at 100,000 ranks, ran 2-3 full collections of the
    upstream's whole heap per pass: half of a pass's time. It is off for the
    pass and as it was after (off stays off)."""
    import gc

    c = coordinator(hung(250))  # 2,000 ranks, uploads aged at the pass
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    old = gc.get_threshold()
    gc.set_threshold(50, 2, 2)
    gc.collect()  # counts from zero: the few objects made before the pass stay under 50
    gc.callbacks.append(seen)
    try:
        analysis = c.reanalyse(T + 5.0)
        assert collections == [] and gc.isenabled()
        gc.disable()
        assert c.reanalyse(T + 10.5) is not None and not gc.isenabled()
    finally:
        gc.enable()
        gc.set_threshold(*old)
        gc.callbacks.remove(seen)
    assert analysis is not None and analysis.diagnosis.culprits == (3,)
    assert c.analyses == 2
