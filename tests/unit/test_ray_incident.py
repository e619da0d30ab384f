"""A Ray watcher finding as an incident, and what on_ray_finding does with it.

Pure core, fake clock: the findings come from the real judges over plain
snapshots shaped like Ray 2.60's rows (the fixtures of test_ray_watch_core).
"""

from __future__ import annotations

from tests.unit.test_ray_watch_core import (
    ALPHA,
    BETA,
    F1,
    F2,
    JOB,
    STACK_WAITS,
    T0,
    G,
    pg,
    snap,
)
from trainprobe.sidecar.core.incident.actions import Action
from trainprobe.sidecar.core.incident.policy import KillBudget
from trainprobe.sidecar.core.ray.incident import decide_ray, ray_incident, ray_targets
from trainprobe.sidecar.core.ray.placement import PlacementHistory, PlacementLimits, judge_placement
from trainprobe.sidecar.core.ray.snapshot import ActorInfo
from trainprobe.sidecar.core.ray.wait import CycleJudge
from trainprobe.sidecar.core.session.model import Verdict

MONO = 500.0  # the sidecar's monotonic clock at detection
CONTROLLER = ActorInfo("c" * 32, "", "TrainController", "ALIVE", pid=77, job_id=JOB)


def infeasible_finding(age_s: float = 4.0):
    group = pg([{"CPU": 1}] * 4, created_at=T0 - age_s)
    (found,) = judge_placement(
        snap(group, actors=[CONTROLLER]), PlacementHistory(), T0, PlacementLimits(60)
    )
    return found


def cycle_finding():
    judge, s = CycleJudge(), snap(tasks=[F1, G, F2], actors=[ALPHA, BETA], waits=STACK_WAITS)
    judge.judge(s, T0 - 2)
    (found,) = judge.judge(s, T0)
    return found


def stuck_finding():
    holder = pg([{"CPU": 2}], state="CREATED", pg_id="bb" * 18, sched="FINISHED")
    history, limits = PlacementHistory(), PlacementLimits(3)
    judge_placement(snap(holder, pg([{"CPU": 1}], attempts=1)), history, T0, limits)
    (found,) = judge_placement(snap(holder, pg([{"CPU": 1}], attempts=9)), history, T0 + 5, limits)
    return found


def test_infeasible_group_is_a_hung_incident_of_the_ray_job_with_its_onset() -> None:
    f = infeasible_finding(age_s=4.0)
    inc = ray_incident(f, MONO, wall_now=T0 + 1.0)  # logged 1 s after the snapshot
    assert (inc.rule, inc.verdict, inc.job_id) == ("placement_group", Verdict.HUNG, JOB)
    assert inc.ranks == [] and inc.targets == []
    assert inc.detection_latency_s == 5.0  # created 4 s before the snapshot, +1 s
    assert inc.evidence["ray"]["kind"] == "infeasible"
    assert inc.evidence["ray"]["key"] == f.key
    assert inc.diagnosis == {"text": f.text}
    rec = inc.to_record()
    assert rec["type"] == "incident" and rec["rule"] == "placement_group"
    assert rec["verdict"] == "HUNG" and rec["action"] == "observe"


def test_cycle_incident_names_the_waiting_pids() -> None:
    inc = ray_incident(cycle_finding(), MONO, wall_now=T0)
    assert inc.rule == "wait_cycle" and inc.pids == [101, 102]
    assert inc.detection_latency_s == 0.0


def test_observe_is_the_default_and_ends_nothing() -> None:
    f = infeasible_finding()
    inc, budget = ray_incident(f, MONO, T0), KillBudget(3)
    assert decide_ray(inc, f, "observe", False, budget, MONO) == []
    assert inc.action == Action.OBSERVE and inc.action_reason == "on_ray_finding=observe"
    assert budget.remaining(JOB, MONO) == 3


def test_kill_targets_the_cycles_actors_and_the_train_controller() -> None:
    assert ray_targets(cycle_finding()) == sorted({ALPHA.actor_id, BETA.actor_id})
    f = infeasible_finding()
    assert ray_targets(f) == [CONTROLLER.actor_id]
    inc, budget = ray_incident(f, MONO, T0), KillBudget(3)
    assert decide_ray(inc, f, "kill", False, budget, MONO) == [CONTROLLER.actor_id]
    assert inc.action == Action.KILL and not inc.dry_run
    assert budget.remaining(JOB, MONO) == 2


def test_a_stuck_group_is_never_killed() -> None:
    f = stuck_finding()
    assert f.evidence["kind"] == "stuck"
    inc, budget = ray_incident(f, MONO, T0), KillBudget(3)
    assert decide_ray(inc, f, "kill", False, budget, MONO) == []
    assert inc.action == Action.OBSERVE
    assert "stuck group fits the cluster" in inc.action_reason
    assert budget.remaining(JOB, MONO) == 3


def test_kill_budget_and_dry_run_hold_for_ray_findings() -> None:
    f = cycle_finding()
    budget = KillBudget(1)
    first = ray_incident(f, MONO, T0)
    assert decide_ray(first, f, "restart", True, budget, MONO)
    assert first.action == Action.RESTART and first.dry_run
    second = ray_incident(f, MONO + 1, T0 + 1)
    assert decide_ray(second, f, "kill", False, budget, MONO + 1) == []
    assert second.action == Action.OBSERVE and "max_kills_per_hour" in second.action_reason
