"""Episodes, incident grouping, the action policy and the kill budget."""

from __future__ import annotations

from tests.core_builders import connected, report
from trainprobe.sidecar.core.incident import (
    ActionPolicy,
    FindingEdges,
    KillBudget,
    decide,
    group_incidents,
)
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.session import Registry, StallPolicy, Verdict, p99, stall_threshold

T0 = 100.0


def hung_job(n: int = 4) -> tuple[Registry, RuleConfig]:
    reg = Registry()
    for r in range(n):
        w = connected(reg, r, T0)
        reg.apply(w, report(T0 + 1, step=5), T0 + 1)
    return reg, RuleConfig(stall=StallPolicy(timeout_s=3), heartbeat_timeout_s=1e6)


def test_a_firing_rule_is_one_episode_until_it_clears() -> None:
    reg, cfg = hung_job(2)
    tracker = FindingEdges()
    first = tracker.new_findings(evaluate(reg, cfg, T0 + 4.5))
    assert {f.key.rank for f in first} == {0, 1}
    assert tracker.new_findings(evaluate(reg, cfg, T0 + 4.6)) == []
    w0 = next(w for w in reg if w.hello.rank == 0)
    reg.apply(w0, report(T0 + 4.7, step=6, seq=2), T0 + 4.7)  # rank 0 recovers
    assert tracker.new_findings(evaluate(reg, cfg, T0 + 4.8)) == []
    again = tracker.new_findings(evaluate(reg, cfg, T0 + 8.0))  # and stalls again
    assert [f.key.rank for f in again] == [0]


def test_ranks_stalling_together_make_one_incident() -> None:
    reg, cfg = hung_job(4)
    fresh = FindingEdges().new_findings(evaluate(reg, cfg, T0 + 4.5))
    states = {w.key: w for w in reg}
    [inc] = group_incidents(fresh, states, T0 + 4.5, wall_now=1.7e9)
    assert inc.ranks == [0, 1, 2, 3] and inc.targets == [0, 1, 2, 3]
    assert inc.pids == [1000, 1001, 1002, 1003]
    assert inc.verdict is Verdict.HUNG and inc.rule == "stall"
    assert abs(inc.detection_latency_s - 3.5) < 1e-6  # from the last step at T0 + 1
    record = inc.to_record()
    for key in ("time", "job_id", "rule", "verdict", "ranks", "pids", "action", "evidence"):
        assert key in record
    assert record["evidence"]["2"]["step"] == 5


def test_policy_and_kill_budget() -> None:
    reg, cfg = hung_job(1)
    states = {w.key: w for w in reg}
    policy = ActionPolicy(on_hung="kill", max_kills_per_hour=2)
    budget = KillBudget(policy.max_kills_per_hour)
    actions = []
    for i in range(3):
        [inc] = group_incidents(evaluate(reg, cfg, T0 + 5), states, T0 + 5, 0.0)
        decide(inc, policy, budget, now=T0 + i)
        actions.append(inc.action)
    assert actions == ["kill", "kill", "observe"]
    assert "max_kills_per_hour" in inc.action_reason
    # An hour later the budget is back.
    [inc] = group_incidents(evaluate(reg, cfg, T0 + 5), states, T0 + 5, 0.0)
    decide(inc, policy, budget, now=T0 + 3601)
    assert inc.action == "kill"


def test_policy_maps_verdicts_and_marks_dry_run() -> None:
    reg, cfg = hung_job(1)
    states = {w.key: w for w in reg}
    [inc] = group_incidents(evaluate(reg, cfg, T0 + 5), states, T0 + 5, 0.0)
    decide(inc, ActionPolicy(on_hung="dump", dry_run=True), KillBudget(0), T0)
    assert inc.action == "dump" and inc.dry_run
    inc.verdict = Verdict.DEGRADED
    decide(inc, ActionPolicy(), KillBudget(10), T0)
    assert inc.action == "observe"


def test_p99_and_threshold_merging() -> None:
    assert p99([]) is None
    assert p99([1.0]) == 1.0
    assert p99([float(i) for i in range(1, 101)]) == 99.0
    policy = StallPolicy(floor_s=30, p99_factor=10, warmup_steps=20, startup_timeout_s=600)
    assert stall_threshold(policy, [5, 3], [0.1, None]).basis == "warmup"
    thr = stall_threshold(policy, [25, 30], [0.5, 4.0])
    assert (thr.seconds, thr.basis, thr.p99_s) == (40.0, "auto", 4.0)
    assert stall_threshold(StallPolicy(timeout_s=7), [], []).seconds == 7


def test_an_incidents_job_name_is_its_verified_sessions_not_an_unverified_culprits() -> None:
    # The unverified session (first in, and the one that stalls) calls the job
    # otherwise; the record carries the name the verified rank gave it.
    from dataclasses import replace

    from tests.core_builders import hello
    from trainprobe.sidecar.core.session.model import VerifiedProcess

    reg = Registry()
    liar = reg.open(replace(hello(rank=1), job_name="renamed"), T0)
    h0 = replace(hello(rank=0), job_name="train")
    real = reg.open(h0, T0, VerifiedProcess(h0.pid, 1000, 1))
    reg.apply(liar, report(T0 + 1, step=5), T0 + 1)
    reg.apply(real, report(T0 + 4, step=9), T0 + 4)
    cfg = RuleConfig(stall=StallPolicy(timeout_s=3), heartbeat_timeout_s=1e6)
    fresh = FindingEdges().new_findings(evaluate(reg, cfg, T0 + 4.5))
    assert [f.key.rank for f in fresh] == [1]
    [inc] = group_incidents(fresh, {w.key: w for w in reg}, T0 + 4.5, wall_now=1.7e9)
    assert inc.to_record()["job_name"] == "train"
