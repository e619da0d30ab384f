"""The Ray job sync's protocol: a digest while healthy, deltas while details are needed.

Pure: the coordinator's state (:class:`CoordinatorState`, its
:class:`~trainprobe.sidecar.core.job.store.RankStore`) and a sidecar's
:class:`JobView`, stepped by hand on a fake clock.
"""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable

from tests.core_builders import connected, report
from tests.unit.test_engine import seq
from trainprobe.sidecar.core.hang import CulpritPolicy, HangConfig, HangState
from trainprobe.sidecar.core.hang.state import diagnose
from trainprobe.sidecar.core.incident import ActionPolicy
from trainprobe.sidecar.core.job.digest import (
    DETAIL_LINGER_S,
    DIGEST_MAX_SUSPECTS,
    is_suspect,
    refresh_s,
    same_summary,
)
from trainprobe.sidecar.core.job.view import CoordinatorState, JobView
from trainprobe.sidecar.core.judge import RuleConfig
from trainprobe.sidecar.core.judge.culprit import HEALTHY, GroupProgress, RankSummary
from trainprobe.sidecar.core.session import Registry

WORLD_PER_NODE = 8


def rank(r: int, world: int, step: int = 10, inflight: float | None = None, **kw: object):  # type: ignore[no-untyped-def]
    g = GroupProgress(
        "default",
        issued=step + (inflight is not None),
        completed=step,
        inflight_age_s=inflight,
        inflight_op="allreduce" if inflight is not None else "",
        inflight_seq=step + 1 if inflight is not None else 0,
    )
    fields: dict[str, object] = {
        "has_step": True,
        "step": step,
        "step_age_s": 0.1,
        "report_age_s": 0.2,
        "groups": (g,),
        "normal_step_s": 2.0,
        "verified": True,
    }
    fields.update(kw)
    return RankSummary(rank=r, world_size=world, host=f"h{r // WORLD_PER_NODE}", **fields)  # type: ignore[arg-type]


def node(n: int, nodes: int, step: int = 10, **kw: object) -> list[RankSummary]:
    world = nodes * WORLD_PER_NODE
    return [rank(n * WORLD_PER_NODE + i, world, step, **kw) for i in range(WORLD_PER_NODE)]


def healthy_job(nodes: int) -> tuple[CoordinatorState, float]:
    c = CoordinatorState(instance="c1")
    now = 0.0
    for sync in range(3):
        for n in range(nodes):
            now += 0.001
            c.sync(f"s{n}", node(n, nodes, step=10 + sync), None, now, detail=False)
    return c, now


def test_a_healthy_job_answers_each_sidecar_a_digest_that_does_not_grow_with_nodes() -> None:
    sizes = {}
    for nodes in (10, 300):
        c, now = healthy_job(nodes)
        reply = c.sync("s0", node(0, nodes, step=13), None, now + 1.5, detail=False)
        assert reply.others == () and not reply.detail and reply.digest is not None
        d = reply.digest
        assert d.ranks == d.world_size == d.reporting == nodes * WORLD_PER_NODE
        assert d.healthy and d.suspects == 0 and (d.min_step, d.max_step) == (12, 13)
        sizes[nodes] = len(pickle.dumps(reply))
    # A few digits more in the counts, nothing per node.
    assert sizes[300] - sizes[10] < 16, sizes


def test_a_suspect_rank_anywhere_is_in_every_sidecars_digest_bounded() -> None:
    nodes = 10
    c, now = healthy_job(nodes)
    c.sync("s3", node(3, nodes, step=12, inflight=2.0), None, now + 0.1, detail=False)
    reply = c.sync("s0", node(0, nodes, step=12), None, now + 0.2, detail=False)
    d = reply.digest
    assert d is not None and not d.healthy and d.suspects == WORLD_PER_NODE
    assert d.suspect_ranks == tuple(range(24, 32))
    # Many suspects: the count is exact, the names are bounded.
    for n in range(nodes):
        c.sync(f"s{n}", node(n, nodes, step=12, verdict="HUNG"), None, now + 0.3, detail=False)
    d = c.sync("s0", node(0, nodes, step=12), None, now + 0.4, detail=False).digest
    assert d is not None and d.suspects == (nodes - 1) * WORLD_PER_NODE
    assert len(d.suspect_ranks) == DIGEST_MAX_SUSPECTS


def test_what_makes_a_rank_suspect() -> None:
    assert not is_suspect(rank(0, 8, inflight=0.9))  # a report's snapshot of a healthy allreduce
    assert is_suspect(rank(0, 8, inflight=1.6))
    assert is_suspect(rank(0, 8, step_age_s=2.5))  # past its normal step time
    assert not is_suspect(rank(0, 8, step_age_s=2.5, phases=("checkpoint",)))  # the rules judge it
    assert not is_suspect(rank(0, 8, step_age_s=30.0, normal_step_s=60.0))  # slow steps, normal
    assert is_suspect(rank(0, 8, reporting=False)) and is_suspect(rank(0, 8, verdict="HUNG"))
    assert is_suspect(rank(0, 8, ended="vanished"))
    assert not is_suspect(rank(0, 8, ended="goodbye", reporting=False))


def test_a_delta_carries_only_what_changed_beyond_aging() -> None:
    c = CoordinatorState(instance="c1")
    c.sync("A", [rank(0, 4), rank(1, 4)], None, 10.0)
    full = c.sync("B", [rank(2, 4), rank(3, 4)], None, 10.1, detail=True)
    assert full.full and sorted(s.rank for s, _ in full.others) == [0, 1]
    view = JobView()
    view.update("j", full, 10.1)
    # Half a second later: rank 0 only aged (a fresh report, a step as old as
    # before plus the time passed); rank 1 stepped.
    c.sync("A", [rank(0, 4, step_age_s=0.6, report_age_s=0.1), rank(1, 4, step=11)], None, 10.5)
    delta = c.sync("B", [rank(2, 4), rank(3, 4)], None, 10.6, since=full.since)
    assert not delta.full and [s.rank for s, _ in delta.others] == [1] and delta.gone == ()
    view.update("j", delta, 10.6)
    by_rank = {s.rank: s for s in view.remote("j", 10.6, 10.0)}
    assert by_rank[1].step == 11 and abs(by_rank[0].step_age_s - 0.7) < 1e-9
    # Its held report grew 3 s old at the receivers: the fresh one is news again.
    aging = rank(1, 4, step=11, step_age_s=2.6)  # as held, 2.5 s on
    c.sync("A", [rank(0, 4, step_age_s=3.1, report_age_s=0.1), aging], None, 13.0)
    delta = c.sync("B", [rank(2, 4), rank(3, 4)], None, 13.1, since=delta.since)
    assert [s.rank for s, _ in delta.others] == [0]


def test_a_silent_rank_is_not_sent_again_until_its_kernel_word_changes() -> None:
    silent = rank(0, 2, reporting=False, report_age_s=11.0, step_age_s=12.0)
    assert same_summary(silent, rank(0, 2, reporting=False, report_age_s=12.0, step_age_s=13.0), 1)
    read = rank(0, 2, reporting=False, report_age_s=12.0, step_age_s=13.0, kernel="stopped")
    assert not same_summary(silent, read, 1.0)
    assert not same_summary(silent, rank(0, 2, reporting=False, report_age_s=14.0), 1.0)
    assert not same_summary(rank(0, 2), rank(0, 2, inflight=0.1), 1.0)
    # A short heartbeat limit refreshes reporting ranks sooner.
    assert refresh_s(10.0) == 3.0 and abs(refresh_s(0.6) - 0.2) < 1e-9
    assert not same_summary(rank(0, 2), rank(0, 2, step_age_s=0.4), 0.3, refresh_s(0.6))


def test_removals_and_ranks_that_moved_travel_in_the_delta() -> None:
    c = CoordinatorState(stale_after_s=5.0, instance="c1")
    c.sync("A", [rank(0, 3)], None, 0.0)
    c.sync("B", [rank(1, 3)], None, 0.0)
    first = c.sync("C", [rank(2, 3)], None, 0.1, detail=True)
    view = JobView()
    view.update("j", first, 0.1)
    assert sorted(s.rank for s in view.remote("j", 0.1, 10.0)) == [0, 1]
    # B goes quiet; rank 0 moves to C (its actor restarted on C's node).
    c.sync("A", [], None, 4.0)
    delta = c.sync("C", [rank(0, 3), rank(2, 3)], None, 6.0, since=first.since)
    assert delta.others == () and delta.gone == (0, 1)
    view.update("j", delta, 6.0)
    assert view.remote("j", 6.0, 10.0) == []


def test_a_coordinator_created_again_answers_in_full() -> None:
    old = CoordinatorState(instance="c1")
    old.sync("A", [rank(0, 2)], None, 0.0)
    since = old.sync("B", [rank(1, 2)], None, 0.0).since
    new = CoordinatorState(instance="c2")
    new.sync("A", [rank(0, 2)], None, 1.0)
    reply = new.sync("B", [rank(1, 2)], None, 1.0, since=since)
    assert reply.full and [s.rank for s, _ in reply.others] == [0]


def test_a_view_kept_by_deltas_is_the_view_a_full_answer_gives() -> None:
    rng = random.Random(7)
    nodes, c = 6, CoordinatorState(instance="c1")
    steps = {r: 0 for r in range(nodes * WORLD_PER_NODE)}
    view, since, now = JobView(), None, 0.0
    for _ in range(40):
        now += 0.5
        for n in range(1, nodes):
            ranks = []
            for r in range(n * WORLD_PER_NODE, (n + 1) * WORLD_PER_NODE):
                if rng.random() < 0.3:
                    steps[r] += 1
                stuck = rng.random() < 0.2
                ranks.append(
                    rank(
                        r,
                        nodes * WORLD_PER_NODE,
                        steps[r],
                        inflight=rng.choice([None, 0.3, 2.0]),
                        report_age_s=round(rng.random(), 3),
                        reporting=not stuck,
                    )
                )
            c.sync(f"s{n}", ranks, None, now + rng.random() / 10)
        reply = c.sync("s0", node(0, nodes), None, now + 0.2, since=since)
        view.update("j", reply, now + 0.3)
        since = reply.since
        truth = JobView()
        truth.update("j", c.sync("s0", node(0, nodes), None, now + 0.2), now + 0.3)
        at = now + 0.4
        held = sorted(view.remote("j", at, 10.0), key=lambda s: s.rank)
        fresh = sorted(truth.remote("j", at, 10.0), key=lambda s: s.rank)
        assert [s.rank for s in held] == [s.rank for s in fresh]
        # The same beyond aging; a reporting rank's report age no older than the refresh.
        assert all(same_summary(h, f, 0.0) for h, f in zip(held, fresh, strict=True))


def test_a_sidecar_asks_for_details_only_while_it_needs_them() -> None:
    view = JobView()
    c, now = healthy_job(4)
    healthy = node(0, 4)
    assert view.ask("j", healthy, False, now) == (False, None)
    view.update("j", c.sync("s0", healthy, None, now, detail=False), now)
    assert view.ask("j", healthy, False, now) == (False, None)
    # A rank here waits 2 s in an allreduce: every other rank is fetched, then
    # only the changes, and for a while after the doubt is gone.
    assert view.ask("j", node(0, 4, inflight=2.0), False, now) == (True, None)
    reply = c.sync("s0", healthy, None, now, detail=True)
    view.update("j", reply, now)
    assert view.detailed("j") and view.ask("j", healthy, False, now + 1) == (True, reply.since)
    assert view.ask("j", healthy, False, now + DETAIL_LINGER_S + 0.1) == (False, None)
    # An episode open here, or a suspect rank in another node's: details.
    assert view.ask("j", healthy, True, now + 20)[0]
    c.sync("s2", node(2, 4, reporting=False), None, now + 30, detail=False)
    view.update("j", c.sync("s0", healthy, None, now + 30, detail=False), now + 30)
    assert not view.detailed("j") and view.ask("j", healthy, False, now + 40)[0]


def test_a_rank_lost_makes_a_sidecar_ask_for_details_a_job_still_connecting_does_not() -> None:
    c = CoordinatorState(instance="c1", stale_after_s=30.0)
    c.sync("s1", node(1, 3), None, 0.0, detail=False)  # node 2's ranks have not come yet
    view = JobView()
    view.update("j", c.sync("s0", node(0, 3), None, 0.1, detail=False), 0.1)
    # A job's start: every node would fetch every rank until the last one connects.
    assert view.ask("j", node(0, 3), False, 0.2) == (False, None)
    c.sync("s2", node(2, 3), None, 0.3, detail=False)
    view.update("j", c.sync("s0", node(0, 3), None, 0.4, detail=False), 0.4)
    assert view.ask("j", node(0, 3), False, 0.5) == (False, None)
    # Node 2 goes silent past the stale limit: its ranks, once held, are missing.
    c.sync("s1", node(1, 3), None, 20.0, detail=False)
    view.update("j", c.sync("s0", node(0, 3), None, 31.0, detail=False), 31.0)
    assert view.ask("j", node(0, 3), False, 31.1)[0]
    # A new stream to an upstream that restarted: the nodes come back one by one.
    view.new_source()
    again = CoordinatorState(instance="c2")
    view.update("j", again.sync("s0", node(0, 3), None, 50.0, detail=False), 50.0)
    assert view.ask("j", node(0, 3), False, 50.1 + DETAIL_LINGER_S) == (False, None)


def test_diagnose_of_a_healthy_job_held_as_a_digest_reads_it_and_asks_for_details() -> None:
    rules = RuleConfig(heartbeat_timeout_s=1e6)
    view = JobView()
    state = HangState.new(HangConfig(rules, ActionPolicy(), CulpritPolicy(), "here"), None, view)
    reg = Registry()
    w = connected(reg, 0, 100.0, world=16)
    reg.apply(w, report(100.5, step=12, step_t_s=100.4, sync=seq(12, 12)), 100.5)
    c = CoordinatorState(instance="c1")
    c.sync("s1", node(1, 2, step=12), None, 100.5, detail=False)
    mine = [rank(r, 16, 12) for r in range(8)]
    view.update("job", c.sync("here", mine, None, 100.5, detail=False), 100.5)
    diag, ep = diagnose(state, reg.workers(), "job", 100.6)
    assert diag.kind == HEALTHY and ep is None
    assert diag.summary == "no rank is hung or unresponsive (16 ranks reporting, steps 12..12)"
    # Not held here: the next syncs fetch them, so the next diagnose has them.
    assert view.ask("job", mine, False, 100.7) == (True, None)


def test_an_evidence_round_waits_for_the_other_nodes_ranks_while_only_the_digest_is_here() -> None:
    """Ranks 0 and 1 here are stopped; ranks 2 and 3 step on another node. Held
    as a digest only, the job would look held whole (a pause) on this node's
    ranks alone: the round waits for the ranks, then kills."""
    from tests.unit.test_hang_machine import RULES, kinds, tick
    from trainprobe.sidecar.core.hang import PatienceBook, step
    from trainprobe.sidecar.core.hang.effects import EvidenceRound, Watch
    from trainprobe.sidecar.core.hang.state import plan_round
    from trainprobe.sidecar.core.job.digest import DETAIL_WAIT_S
    from trainprobe.sidecar.core.judge.evidence import RankEvidence

    t0 = 100.0
    stopped = {r: RankEvidence(r, state="stopped", samples=2) for r in (0, 1)}

    def theirs(now: float) -> list[RankSummary]:
        return [rank(r, 4, 9 + int(now - t0), step_age_s=0.2) for r in (2, 3)]

    def opened() -> tuple[CoordinatorState, JobView, Callable[[float], list[str]]]:
        view = JobView()
        config = HangConfig(RULES, ActionPolicy(), CulpritPolicy("kill_stalled", 10.0), "here")
        state, reg = HangState.new(config, PatienceBook(setting_s=0.0), view), Registry()
        for r in (0, 1):
            w = connected(reg, r, t0, world=4)
            reg.apply(w, report(t0 + 4.5, step=5, step_t_s=t0 + 1), t0 + 4.5)
        c = CoordinatorState(instance="c1")
        c.sync("there", theirs(t0 + 4.4), None, t0 + 4.4, detail=False)
        view.update("job", c.sync("here", [], None, t0 + 4.5, detail=False), t0 + 4.5)
        (watch,) = [e for e in tick(state, reg, t0 + 4.5) if isinstance(e, Watch)]

        def judged(now: float) -> list[str]:
            plan = plan_round(state, watch.episode, reg.workers(), watch.round)
            assert plan is not None
            rnd = EvidenceRound(watch.episode, watch.incident, watch.round, plan.states, stopped)
            return kinds(step(state, reg.workers(), None, (rnd,), now)[1])

        return c, view, judged

    c, view, judged = opened()
    assert judged(t0 + 5.5) == ["Watch"]  # nothing decided: the ranks are on their way
    c.sync("there", theirs(t0 + 5.6), None, t0 + 5.6)
    view.update("job", c.sync("here", [], None, t0 + 5.7, detail=True), t0 + 5.7)
    effects = judged(t0 + 6.5)
    assert "ExecuteAction" in effects and "ResumeJob" not in effects
    # A coordinator that never sends them does not hold the episode for ever:
    # judged on this node's ranks alone, as without a coordinator.
    _, view, judged = opened()
    assert view.awaiting("job") and judged(t0 + 4.5 + DETAIL_WAIT_S + 0.1) != ["Watch"]


def test_another_sidecars_episode_is_followed_once_the_jobs_ranks_are_here() -> None:
    """Which culprits are this sidecar's to act on needs the job's ranks: with
    the digest only, the episode is followed at the sync that brings them."""
    from tests.unit.test_hang_machine import RULES, tick
    from trainprobe.sidecar.core.hang import PatienceBook
    from trainprobe.sidecar.core.hang.effects import Inspect
    from trainprobe.sidecar.core.job import EpisodeNote
    from trainprobe.sidecar.core.judge import summarize

    t0 = 100.0
    config = HangConfig(RULES, ActionPolicy(), CulpritPolicy(), "here", reads_stacks=True)
    view = JobView()
    state, reg = HangState.new(config, PatienceBook(setting_s=0.0), view), Registry()
    mine = connected(reg, 1, t0, world=2)
    reg.apply(mine, report(t0 + 4.5, step=7, step_t_s=t0 + 2, sync=seq(7, 7)), t0 + 4.5)
    theirs = Registry()
    peer = connected(theirs, 0, t0, world=2)
    waiting = seq(8, 7, inflight_since_s=t0 + 2)
    theirs.apply(peer, report(t0 + 4.5, step=7, step_t_s=t0 + 2, sync=waiting), t0 + 4.5)
    note = EpisodeNote("ep-1", "job", "there", "HUNG", "stall", culprits=(1,))
    c = CoordinatorState(instance="c1")
    c.sync("there", [summarize(peer, t0 + 4.5, 10.0)], note, t0 + 4.5)
    view.update("job", c.sync("here", [], None, t0 + 4.5, detail=False), t0 + 4.5)
    assert view.episode("job") == note and view.awaiting("job")
    assert not [e for e in tick(state, reg, t0 + 4.5) if isinstance(e, Inspect)]
    view.update("job", c.sync("here", [], None, t0 + 4.6, detail=True), t0 + 4.6)
    (inspect,) = [e for e in tick(state, reg, t0 + 4.6) if isinstance(e, Inspect)]
    assert inspect.incident.targets == [1]


def test_a_stopped_rank_here_is_held_back_while_the_other_nodes_ranks_are_not_here() -> None:
    """With the job's digest only, another node's ranks may be stopped with it (a
    pause): the early 'stopped' finding waits for them, as for an unread rank;
    and a rank here gone silent makes the sidecar ask for them at once."""
    from trainprobe.sidecar.core.hang.stopped import _silent_beside

    assert _silent_beside("job", set(), 10.0, [], 11.0, 0.0, None)
    assert not _silent_beside("job", set(), 10.0, [], 11.0, 0.0, [])
    c, now = healthy_job(2)
    view = JobView()
    view.update("job", c.sync("s0", node(0, 2), None, now, detail=False), now)
    assert view.awaiting("job") and view.ask("job", node(0, 2), False, now) == (False, None)
    assert view.ask("job", node(0, 2), True, now) == (True, None)  # needed: a rank went silent
