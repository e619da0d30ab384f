"""A job's hang as one episode: routing, targets, sweeps and the end, from hand-made states."""

from __future__ import annotations

from tests.core_builders import connected, hello, report
from trainprobe.sidecar.core.hang import CulpritPolicy, JobEpisodes, plan_targets
from trainprobe.sidecar.core.hang.records import IncidentUpdate
from trainprobe.sidecar.core.incident import (
    ActionPolicy,
    FindingEdges,
    KillBudget,
    decide,
    group_incidents,
)
from trainprobe.sidecar.core.judge import Diagnosis, RuleConfig, evaluate
from trainprobe.sidecar.core.judge.culprit import INCONCLUSIVE, STRAGGLER
from trainprobe.sidecar.core.session import Registry, StallPolicy, SyncData, Verdict

T0 = 100.0
STRAGGLING_2 = Diagnosis(STRAGGLER, culprits=(2,), waiting=(0, 1, 3), confidence=0.95)
NOBODY = Diagnosis(INCONCLUSIVE)


def hung_job(n: int = 4, job: str = "job") -> tuple[Registry, RuleConfig]:
    reg = Registry()
    for r in range(n):
        w = connected(reg, r, T0, job=job)
        reg.apply(w, report(T0 + 1, step=5), T0 + 1)
    return reg, RuleConfig(stall=StallPolicy(timeout_s=3), heartbeat_timeout_s=2.5)


def incidents_at(reg: Registry, cfg: RuleConfig, tracker: FindingEdges, now: float):  # type: ignore[no-untyped-def]
    workers = list(reg)
    fresh = tracker.new_findings(evaluate(workers, cfg, now))
    return group_incidents(fresh, {w.key: w for w in workers}, now, 1.7e9 + now)


def test_the_first_hang_opens_and_later_ones_update() -> None:
    reg, cfg = hung_job()
    tracker, eps = FindingEdges(), JobEpisodes(CulpritPolicy())
    w0 = next(w for w in reg if w.hello.rank == 0)
    reg.apply(w0, report(T0 + 3.5, step=5, step_t_s=T0 + 1, seq=2), T0 + 3.5)
    # At T0+4.1: rank 0 reports but is stalled (HUNG, 3 s); the others are
    # silent (UNRESPONSIVE, 2.5 s): two incidents in one tick.
    first = incidents_at(reg, cfg, tracker, T0 + 4.1)
    assert {(i.rule, i.verdict) for i in first} == {
        ("heartbeat", Verdict.UNRESPONSIVE),
        ("stall", Verdict.HUNG),
    }
    routing = eps.route(first)
    assert len(routing.openers) == 1 and routing.openers[0].verdict == Verdict.HUNG
    assert [(eid, inc.rule, exp) for eid, inc, exp in routing.updates] == [
        (routing.openers[0].id, "heartbeat", False)
    ]
    assert routing.updates[0][1].ranks == [1, 2, 3]
    opener = routing.openers[0]
    ep = eps.open("job", opener.id, STRAGGLING_2, {r: 1000 + r for r in range(4)}, "kill", T0 + 4)
    # A rank that exits later is an expected update of the same episode, never an incident.
    w1 = next(w for w in reg if w.hello.rank == 1)
    reg.close(w1, w1.generation, "vanished", T0 + 5, pid_alive=False)
    later = eps.route(incidents_at(reg, cfg, tracker, T0 + 5.2))
    assert later.openers == [] and later.plain == []
    assert [(eid, inc.rule, exp) for eid, inc, exp in later.updates] == [(ep.id, "exit", True)]
    record = IncidentUpdate(ep.id, later.updates[0][1], True).to_record()
    assert record["type"] == "incident_update" and record["incident_id"] == ep.id
    assert record["ranks"] == [1] and record["expected"] is True
    # What the rule found, in the incident's own words (Incident.finding), in the
    # order the log's readers see it.
    assert list(record) == [
        *("type", "incident_id", "time", "job_id", "rule", "verdict", "ranks", "culprits"),
        "waiting",
        *("pids", "expected", "evidence"),
    ]
    assert {k: record[k] for k in later.updates[0][1].finding()} == later.updates[0][1].finding()


def test_a_degraded_finding_during_an_episode_stays_its_own_incident() -> None:
    reg = Registry()
    w = connected(reg, 0, T0, world=1)
    sync = SyncData(count=1, p50_s=6.0, max_s=6.0)
    reg.apply(w, report(T0 + 1, step=5, sync=sync), T0 + 1)
    cfg = RuleConfig(sync_latency_s=3.0, heartbeat_timeout_s=1e6)
    eps = JobEpisodes(CulpritPolicy())
    eps.open("job", "e-1", STRAGGLING_2, {0: 1000}, "kill", T0)
    routing = eps.route(incidents_at(reg, cfg, FindingEdges(), T0 + 1.1))
    assert [(i.rule, i.verdict) for i in routing.plain] == [("sync_latency", Verdict.DEGRADED)]
    assert routing.updates == [] and routing.openers == []


def test_an_episode_of_one_job_leaves_the_others_alone() -> None:
    reg, cfg = hung_job(2, job="a")
    b = connected(reg, 0, T0 + 3.9, job="b", world=1)
    reg.close(b, b.generation, "vanished", T0 + 4.0, pid_alive=False)  # a healthy job's exit
    eps = JobEpisodes(CulpritPolicy())
    eps.open("other", "x-1", NOBODY, {0: 1}, "kill", T0)
    routing = eps.route(incidents_at(reg, cfg, FindingEdges(), T0 + 4.1))
    assert [i.job_id for i in routing.openers] == ["a"]  # job "a" has no episode yet
    assert [(i.job_id, i.rule) for i in routing.plain] == [("b", "exit")]
    assert routing.updates == []


def test_targets_are_the_culprits_this_sidecar_serves() -> None:
    policy = CulpritPolicy()
    targets, why = plan_targets(STRAGGLING_2, served=[0, 1, 2, 3], stalled=[0, 1, 3], policy=policy)
    assert targets == [2] and "culprit rank(s) [2] (straggler, confidence 0.95)" in why
    # The culprit runs on another node: nothing here to hit, and the reason says who acts.
    targets, why = plan_targets(STRAGGLING_2, served=[0, 1], stalled=[0, 1], policy=policy)
    assert targets == [] and "served by another sidecar" in why


def test_inconclusive_falls_back_to_the_setting() -> None:
    kill = CulpritPolicy(on_inconclusive="kill_stalled")
    targets, why = plan_targets(NOBODY, served=[0, 1, 2], stalled=[0, 2, 7], policy=kill)
    assert targets == [0, 2] and "on_inconclusive=kill_stalled" in why
    observe = CulpritPolicy(on_inconclusive="observe")
    targets, why = plan_targets(NOBODY, served=[0, 1, 2], stalled=[0, 2], policy=observe)
    assert targets == [] and "on_inconclusive=observe" in why


def test_a_mismatch_tie_targets_every_rank_in_it_not_only_the_first_stalled() -> None:
    tie = Diagnosis("mismatch", (), (0, 1), 0.3, "", {"same_seq": True})
    kill = CulpritPolicy(on_inconclusive="kill_stalled")
    assert plan_targets(tie, [0, 1], [1], kill)[0] == [0, 1]
    split = Diagnosis("mismatch", (), (0, 1), 0.3, "", {"same_seq": False})
    assert plan_targets(split, [0, 1], [1], kill)[0] == [1]
    assert plan_targets(tie, [0, 1], [1], CulpritPolicy(on_inconclusive="observe"))[0] == []


def test_no_target_means_observe_and_no_kill_spent() -> None:
    reg, cfg = hung_job(2)
    (inc, *_) = incidents_at(reg, cfg, FindingEdges(), T0 + 4.1)
    budget = KillBudget(1)
    inc.targets = []
    decide(inc, ActionPolicy(on_hung="kill", on_unresponsive="kill"), budget, T0 + 4)
    assert inc.action == "observe" and "no rank of this sidecar is a target" in inc.action_reason
    assert budget.remaining("job", T0 + 4) == 1


def test_sweep_after_the_grace_hits_only_the_episodes_processes_still_stuck() -> None:
    reg, _ = hung_job(4)
    eps = JobEpisodes(CulpritPolicy(job_kill_grace_s=10))
    ep = eps.open("job", "e-1", STRAGGLING_2, {r: 1000 + r for r in range(4)}, "kill", T0 + 4)
    states = {w.hello.rank: w for w in reg}
    states[2].killed_by_us = True  # the culprit: killed by the episode's action
    reg.close(states[3], states[3].generation, "goodbye", T0 + 6, pid_alive=False)
    reg.apply(states[1], report(T0 + 7, step=6, seq=2), T0 + 7)  # rank 1 moved on
    assert eps.due_sweeps(T0 + 13.9) == []
    (due,) = eps.due_sweeps(T0 + 14.0)
    assert due is ep and eps.due_sweeps(T0 + 20) == []  # once
    assert JobEpisodes.remaining(ep, states) == [0]
    # A new process for rank 0 (a restart) is not the episode's: nothing left, it closes.
    reg.close(states[0], states[0].generation, "vanished", T0 + 15, pid_alive=False)
    fresh = reg.open(hello(rank=0, pid=4242), T0 + 16)
    assert JobEpisodes.remaining(ep, {**states, 0: fresh}) == []
    assert eps.settle({"job": {**states, 0: fresh}}) == [ep] and eps.get("job") is None


def test_when_the_culprit_is_already_gone_its_peers_are_swept_at_once() -> None:
    eps = JobEpisodes(CulpritPolicy(job_kill_grace_s=10))
    ep = eps.open("job", "e-3", STRAGGLING_2, {r: 1000 + r for r in range(4)}, "kill", T0 + 4)
    assert ep.sweep_at == T0 + 14 and ep.sweep_phase == "job_kill_grace"
    eps.arm_sweep(ep, "kill", T0 + 5)  # an ordinary act keeps the grace
    assert ep.sweep_at == T0 + 14
    eps.arm_sweep(ep, "kill", T0 + 5, grace_s=0.0)
    assert ep.sweep_phase == "peers_of_gone"
    assert eps.due_sweeps(T0 + 4.9) == [] and eps.due_sweeps(T0 + 5) == [ep]
    observing = eps.open("other", "e-4", STRAGGLING_2, {0: 2000}, "observe", T0)
    eps.arm_sweep(observing, "observe", T0, grace_s=0.0)
    assert observing.sweep_at is None  # nothing destructive: nothing swept


def test_an_observing_episode_never_sweeps_and_stays_while_ranks_hang() -> None:
    reg, _ = hung_job(2)
    eps = JobEpisodes(CulpritPolicy(job_kill_grace_s=0))
    ep = eps.open("job", "e-2", NOBODY, {0: 1000, 1: 1001}, "observe", T0 + 4)
    assert ep.sweep_at is None and eps.due_sweeps(T0 + 1e6) == []
    states = {w.hello.rank: w for w in reg}
    assert eps.settle({"job": states}) == [] and eps.get("job") is ep


def test_a_coordinator_episode_is_followed_once() -> None:
    eps = JobEpisodes(CulpritPolicy())
    assert eps.should_follow("far-1", "job")
    eps.open("job", "far-1", STRAGGLING_2, {2: 1002}, "kill", T0, remote_id="far-1")
    assert not eps.should_follow("far-1", "job")
    assert eps.settle({"job": {}}) != []  # its process is gone: over
    assert not eps.should_follow("far-1", "job")  # and never followed again
    assert eps.should_follow("far-2", "job")


def test_an_inconclusive_kill_stalled_episode_kills_ranks_that_stall_a_tick_later() -> None:
    from trainprobe.sidecar.core.hang.episodes import late_stalled

    reg, cfg = hung_job(4)
    tracker = FindingEdges()
    for w in reg:  # rank 2's last step ended 50 ms before its peers'
        t_step = T0 + 0.95 if w.hello.rank == 2 else T0 + 1.0
        reg.apply(w, report(T0 + 1.5, step=5, step_t_s=t_step, seq=2), T0 + 1.5)
    cfg = RuleConfig(stall=StallPolicy(timeout_s=3), heartbeat_timeout_s=100)
    first = incidents_at(reg, cfg, tracker, T0 + 3.97)
    assert [i.ranks for i in first] == [[2]]
    later = incidents_at(reg, cfg, tracker, T0 + 4.07)
    assert [i.ranks for i in later] == [[0, 1, 3]]
    kill_stalled = JobEpisodes(CulpritPolicy(on_inconclusive="kill_stalled"))
    ep = kill_stalled.open("job", first[0].id, NOBODY, {r: 1000 + r for r in range(4)}, "kill", 0)
    assert late_stalled(ep, later[0], kill_stalled.policy) == [0, 1, 3]
    # Not when a culprit was named, when observing, or for a finished rank.
    named = JobEpisodes(CulpritPolicy()).open("job", "x", STRAGGLING_2, {}, "kill", 0)
    assert late_stalled(named, later[0], kill_stalled.policy) == []
    watching = JobEpisodes(CulpritPolicy()).open("job", "y", NOBODY, {}, "observe", 0)
    assert late_stalled(watching, later[0], kill_stalled.policy) == []
    observe = CulpritPolicy(on_inconclusive="observe")
    assert late_stalled(ep, later[0], observe) == []
