"""The Ray watcher's pure core: placement-group feasibility and the wait-for graph.

Plain data shaped like what Ray 2.60's State API returned on a local cluster
(ids, states, a PACK group of one-CPU bundles that stays NO_RESOURCES), and a
fake clock: ``now`` is passed in.
"""

from __future__ import annotations

from trainprobe.sidecar.core.ray.placement import (
    PlacementHistory,
    PlacementLimits,
    infeasible_reasons,
    judge_placement,
)
from trainprobe.sidecar.core.ray.snapshot import (
    ActorInfo,
    Bundle,
    NodeInfo,
    PlacementGroupInfo,
    RaySnapshot,
    TaskInfo,
    WaitRecord,
    producer_task_id,
)
from trainprobe.sidecar.core.ray.wait import (
    CycleJudge,
    build_graph,
    render_dot,
    render_text,
    wait_chains,
    wait_cycles,
)

T0 = 1_800_000_000.0
NODE = NodeInfo("n1" * 28, True, {"CPU": 2.0, "memory": 1e10})
GPU_NODE = NodeInfo("n2" * 28, True, {"CPU": 8.0, "GPU": 1.0})


def pg(
    bundles: list[dict[str, float]],
    state: str = "PENDING",
    attempts: int = 1,
    strategy: str = "PACK",
    created_at: float = T0,
    pg_id: str = "aa" * 18,
    sched: str = "NO_RESOURCES",
) -> PlacementGroupInfo:
    return PlacementGroupInfo(
        pg_id,
        "",
        "01000000",
        state,
        sched,
        attempts,
        tuple(Bundle(i, b) for i, b in enumerate(bundles)),
        strategy,
        created_at,
    )


def snap(*pgs: PlacementGroupInfo, nodes=(NODE,), actors=(), tasks=(), waits=(), at=T0):
    return RaySnapshot(at, tuple(nodes), pgs, tuple(tasks), tuple(actors), tuple(waits))


# -- placement groups ----------------------------------------------------------


def test_a_bundle_no_node_can_hold_is_named_with_the_largest_node() -> None:
    group = pg([{"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 4, "GPU": 1}])
    reasons = infeasible_reasons(group, [NODE, NodeInfo("n3" * 28, True, {"CPU": 1.0})])
    assert reasons == ["bundle 3 asks CPU 4, GPU 1; the largest node has CPU 2, GPU 0"]
    # The node named is the one that meets most of the ask (here the GPU).
    reasons = infeasible_reasons(
        pg([{"CPU": 4, "GPU": 1}]), [NODE, NodeInfo("g", True, {"CPU": 1, "GPU": 1})]
    )
    assert reasons == ["bundle 0 asks CPU 4, GPU 1; the largest node has CPU 1, GPU 1"]


def test_bundles_that_each_fit_but_not_together_are_infeasible() -> None:
    # Ray says NO_RESOURCES here, not INFEASIBLE: the TorchTrainer case.
    assert infeasible_reasons(pg([{"CPU": 1}] * 4), [NODE]) == [
        "its 4 bundles ask CPU 4 together; the cluster has CPU 2 on 1 node"
    ]
    two = [NODE, NodeInfo("n3" * 28, True, {"CPU": 2.0})]
    assert infeasible_reasons(pg([{"CPU": 1}] * 4), two) == []
    assert infeasible_reasons(pg([{"CPU": 1}] * 4, strategy="STRICT_PACK"), two) == [
        "STRICT_PACK needs CPU 4 on one node; the largest node has CPU 2"
    ]
    assert infeasible_reasons(pg([{"CPU": 1}] * 3, strategy="STRICT_SPREAD"), two) == [
        "STRICT_SPREAD needs 3 nodes; 2 of the cluster's 2 nodes can hold a bundle"
    ]
    dead = NodeInfo("n4" * 28, False, {"CPU": 64.0})
    assert infeasible_reasons(pg([{"CPU": 1}] * 4), [NODE, dead])  # dead nodes hold nothing


def test_infeasible_group_is_reported_at_once_and_only_once() -> None:
    history, limits = PlacementHistory(), PlacementLimits(60)
    controller = ActorInfo("c" * 32, "", "TrainController", "ALIVE", pid=77, job_id="01000000")
    group = pg([{"CPU": 1}] * 4)
    found = judge_placement(snap(group, actors=[controller]), history, T0 + 0.5, limits)
    assert [f.rule for f in found] == ["placement_group"]
    assert found[0].evidence["kind"] == "infeasible"
    assert "ask CPU 4 together; the cluster has CPU 2" in found[0].text
    assert "Ray Train worker group waits on it (controller TrainController, pid 77" in found[0].text
    assert judge_placement(snap(group, actors=[controller]), history, T0 + 3, limits) == []
    # Once it is created (say a node joined) and pending again, it is judged afresh.
    judge_placement(snap(pg([{"CPU": 1}] * 4, state="CREATED")), history, T0 + 4, limits)
    assert judge_placement(snap(group), history, T0 + 5, limits)


def test_group_waiting_for_resources_held_by_others_is_no_finding_within_the_limit() -> None:
    history, limits = PlacementHistory(), PlacementLimits(60)
    holder = pg([{"CPU": 2}], state="CREATED", pg_id="bb" * 18, sched="FINISHED")
    for i, t in enumerate(range(0, 59, 2)):
        waiting = pg([{"CPU": 1}], attempts=1 + i)
        assert judge_placement(snap(holder, waiting), history, T0 + t, limits) == []
    found = judge_placement(snap(holder, pg([{"CPU": 1}], attempts=40)), history, T0 + 61, limits)
    assert len(found) == 1 and found[0].evidence["kind"] == "stuck"
    assert "scheduling attempts 1 -> 40" in found[0].text
    assert "held by bbbbbbbbbbbb of job 01000000 (CPU 2)" in found[0].text


def test_pending_past_the_limit_without_new_attempts_is_no_finding() -> None:
    history, limits = PlacementHistory(), PlacementLimits(60)
    for t in (0, 30, 90):
        assert judge_placement(snap(pg([{"CPU": 1}], attempts=5)), history, T0 + t, limits) == []


def test_late_watcher_uses_rays_creation_time() -> None:
    history, limits = PlacementHistory(), PlacementLimits(60)
    old = T0 - 300
    assert (
        judge_placement(snap(pg([{"CPU": 1}], attempts=50, created_at=old)), history, T0, limits)
        == []
    )
    found = judge_placement(
        snap(pg([{"CPU": 1}], attempts=52, created_at=old)), history, T0 + 2, limits
    )
    assert found and found[0].evidence["pending_s"] == 302.0


# -- wait-for graph ------------------------------------------------------------

JOB = "01000000"
ALPHA = ActorInfo("a" * 24 + JOB, "alpha", "A", "ALIVE", pid=101, job_id=JOB)
BETA = ActorInfo("b" * 24 + JOB, "beta", "A", "ALIVE", pid=102, job_id=JOB)


def tid(c: str) -> str:
    return c * 16 + "0" * 24 + JOB


def actor_task(
    c: str, actor: ActorInfo, name: str, state: str, parent: str, pid: int = 0
) -> TaskInfo:
    return TaskInfo(tid(c), name, state, "ACTOR_TASK", JOB, actor.actor_id, parent, pid)


# alpha.f runs and gets beta.g; beta.g runs and gets alpha.f, which is queued on alpha.
F1 = actor_task("1", ALPHA, "A.f", "RUNNING", "f" * 48, pid=101)
G = actor_task("2", BETA, "A.g", "RUNNING", tid("1"), pid=102)
F2 = actor_task("3", ALPHA, "A.f", "SUBMITTED_TO_WORKER", tid("2"))
STACK_WAITS = (
    WaitRecord(tid("1"), "cycle.py:17 in A.f", "stack", pid=101),
    WaitRecord(tid("2"), "cycle.py:19 in A.g", "stack", pid=102),
)


def test_two_actor_cycle_from_stacks_names_both_call_sites() -> None:
    s = snap(tasks=[F1, G, F2], actors=[ALPHA, BETA], waits=STACK_WAITS)
    (cycle,) = wait_cycles(s)
    assert {(e.src, e.dst, e.kind) for e in cycle} == {
        (tid("1"), tid("2"), "get"),
        (tid("2"), tid("3"), "get"),
        (tid("3"), tid("1"), "actor_queue"),
    }
    judge = CycleJudge()
    assert judge.judge(s, T0) == []  # once is not stable
    (found,) = judge.judge(s, T0 + 2)
    assert found.rule == "wait_cycle"
    assert (
        "A.f on actor alpha (pid 101) waits at cycle.py:17 in A.f on A.g on actor beta (pid 102)"
        in found.text
    )
    assert (
        "A.g on actor beta (pid 102) waits at cycle.py:19 in A.g on A.f on actor alpha"
        in found.text
    )
    assert "is queued behind A.f on actor alpha (pid 101)" in found.text
    assert judge.judge(s, T0 + 4) == []  # reported once while it lasts


def test_a_cycle_seen_once_is_not_reported() -> None:
    judge = CycleJudge()
    cyc = snap(tasks=[F1, G, F2], actors=[ALPHA, BETA], waits=STACK_WAITS)
    broken = snap(tasks=[F1, G], actors=[ALPHA, BETA], waits=STACK_WAITS)  # F2 ran after all
    for s in (cyc, broken, cyc, broken):
        assert judge.judge(s, T0) == []


def test_wrapper_records_give_producer_edges_from_object_ids() -> None:
    obj_of_g = tid("2") + "01000000"
    obj_of_f2 = tid("3") + "01000000"
    assert producer_task_id(obj_of_g) == tid("2")
    waits = (
        WaitRecord(tid("1"), "cycle.py:17 in f", "wrapper", (obj_of_g,), pid=101),
        WaitRecord(tid("2"), "cycle.py:19 in g", "wrapper", (obj_of_f2,), pid=102),
    )
    # Threaded actors: children name the creation task, so only the wrapper ties them.
    g = actor_task("2", BETA, "A.g", "RUNNING", "f" * 48, pid=102)
    creation = TaskInfo("f" * 48, "A.__init__", "FINISHED", "ACTOR_CREATION_TASK", JOB)
    s = snap(tasks=[F1, g, F2, creation], actors=[ALPHA, BETA], waits=waits)
    (cycle,) = wait_cycles(s)
    assert [e.object_id for e in cycle if e.kind == "get"] in (
        [obj_of_g, obj_of_f2],
        [obj_of_f2, obj_of_g],
    )


def test_chain_to_a_hung_actor_is_a_chain_not_a_cycle() -> None:
    hang = actor_task("9", ALPHA, "Hanger.hang", "RUNNING", tid("5"), pid=101)
    t1 = TaskInfo(tid("4"), "outer", "RUNNING", parent_task_id="d" * 48, pid=201)
    t2 = TaskInfo(tid("5"), "inner", "RUNNING", parent_task_id=tid("4"), pid=202)
    waits = (
        WaitRecord(tid("4"), "chain.py:5 in outer", "wrapper", (tid("5") + "01000000",), pid=201),
        WaitRecord(tid("5"), "chain.py:9 in inner", "stack", pid=202),
    )
    s = snap(tasks=[t1, t2, hang], actors=[ALPHA], waits=waits)
    assert wait_cycles(s) == []
    judge = CycleJudge()
    assert judge.judge(s, T0) == [] and judge.judge(s, T0 + 2) == []
    graph = build_graph(s)
    assert wait_chains(graph) == [[tid("4"), tid("5"), tid("9")]]
    text = render_text(graph)
    assert "head: Hanger.hang on actor alpha (pid 101) waits on nothing" in text
    assert "task outer (pid 201) waits at chain.py:5 in outer on task inner (pid 202)" in text
    dot = render_dot(graph)
    assert dot.startswith("digraph") and '"chain.py:9 in inner"' in dot and dot.count("->") == 2


def test_finished_tasks_and_unknown_producers_make_no_edges() -> None:
    done = TaskInfo(tid("7"), "done", "FINISHED")
    w = WaitRecord(tid("1"), "x.py:1 in f", "wrapper", (tid("7") + "01000000", "ab" * 28))
    assert build_graph(snap(tasks=[F1, done], actors=[ALPHA], waits=[w])).edges == []


# py-spy's dump of an actor blocked in ray.get (Ray 2.60), and behind the wrapper.
SPY = """Process 6536: ray::A.g
Thread 6536 (idle): "MainThread"
    Worker.get_objects (ray/_private/worker.py:1007)
    get (ray/_private/worker.py:3009)
    client_mode_hook.<locals>.decorator.<locals>.wrapper (ray/_private/client_mode_hook.py:134)
    wrap_auto_init.<locals>.auto_init_wrapper (ray/_private/auto_init_hook.py:22)
    {wrapper}A.g (explore2.py:19)
    actor_method_executor (ray/_private/function_manager.py:740)
    Worker.main_loop (ray/_private/worker.py:1069)
Thread 6609 (idle): "PythonGCThread"
    Event.wait (threading.py:629)
"""


def test_ray_get_call_site_from_a_py_spy_dump() -> None:
    from trainprobe.sidecar.core.judge.stackframes import parse_stacks
    from trainprobe.sidecar.core.ray.snapshot import ray_get_site

    assert ray_get_site(parse_stacks(SPY.format(wrapper=""))) == "explore2.py:19 in A.g"
    behind = SPY.format(wrapper="get (hooks/ray_wait.py:98)\n    ")
    assert ray_get_site(parse_stacks(behind)) == "explore2.py:19 in A.g"
    idle = SPY.replace("Worker.get_objects", "compute").replace("get (ray", "run (ray")
    assert ray_get_site(parse_stacks(idle.format(wrapper=""))) == ""
