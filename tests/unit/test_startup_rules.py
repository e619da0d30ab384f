"""Start-up as phases: a rank before init_process_group, judged against its peers."""

from __future__ import annotations

import dataclasses

from tests.core_builders import connected, hello, phase, report
from trainprobe.sidecar.core.judge import RuleConfig, analyze, evaluate
from trainprobe.sidecar.core.judge.culprit import ALL_IN_FLIGHT, STRAGGLER
from trainprobe.sidecar.core.judge.summary import summarize
from trainprobe.sidecar.core.session import GroupSeqData, Registry, StallPolicy, SyncData, Verdict
from trainprobe.sidecar.core.session.model import VerifiedProcess, WorkerState

T0 = 100.0
CFG = RuleConfig(
    heartbeat_timeout_s=1e6,
    stall=StallPolicy(timeout_s=5, startup_timeout_s=600),
    init_straggler_s=5.0,
    rendezvous_timeout_s=120.0,
)


def job(arrivals: dict[int, float | None], world: int = 3) -> Registry:
    """Ranks in phase init since T0; those with an arrival time also in rendezvous."""
    reg = Registry()
    for rank, arrived in arrivals.items():
        w = connected(reg, rank, T0, world=world)
        phases = (phase("init", T0),)
        if arrived is not None:
            phases += (phase("rendezvous", arrived),)
        reg.apply(w, report(T0 + 30, phases=phases), T0 + 30)
    return reg


def found(reg: Registry, now: float) -> dict[int, str]:
    return {f.key.rank: f.rule for f in evaluate(reg, CFG, now)}


def test_the_rank_not_arrived_is_named_straggler_s_after_the_last_peer_arrived() -> None:
    reg = job({0: T0 + 10, 1: None, 2: T0 + 12})
    assert found(reg, T0 + 16.9) == {}  # 4.9 s after the last arrival: not yet
    hung = evaluate(reg, CFG, T0 + 17.5)
    assert [(f.key.rank, f.rule) for f in hung] == [(1, "init_straggler")]
    assert hung[0].evidence["waiting"] == [0, 2]
    assert hung[0].evidence["waited_s"] == 5.5


def test_waiting_ranks_are_never_blamed_and_no_peer_waiting_means_no_verdict() -> None:
    # Nobody arrived: every rank is still in its own start-up (the start-up rule's 600 s).
    assert found(job({0: None, 1: None, 2: None}), T0 + 300) == {}
    assert found(job({0: None, 1: None, 2: None}), T0 + 601) == {
        0: "startup",
        1: "startup",
        2: "startup",
    }
    # Arrived ranks wait, whatever their wait, until every rank is inside.
    assert found(job({0: T0 + 1, 1: None, 2: T0 + 1}), T0 + 500) == {1: "init_straggler"}


def test_every_rank_inside_and_none_out_is_a_stuck_rendezvous() -> None:
    reg = job({0: T0 + 1, 1: T0 + 2, 2: T0 + 3})
    assert found(reg, T0 + 122) == {}
    assert found(reg, T0 + 124) == {0: "rendezvous", 1: "rendezvous", 2: "rendezvous"}
    # A rank of a bigger world absent from this sidecar: its peers wait for it, no verdict.
    assert found(job({0: T0 + 1, 1: T0 + 2}, world=3), T0 + 500) == {}


def test_start_up_phases_do_not_cover_peers_as_a_declared_phase_does() -> None:
    reg = job({0: T0 + 1, 1: None, 2: T0 + 1})
    assert found(reg, T0 + 7) == {1: "init_straggler"}
    reg2 = Registry()
    w = connected(reg2, 0, T0, world=2)
    reg2.apply(
        w, report(T0 + 1, step=3, step_t_s=T0, phases=(phase("checkpoint", T0, 900),)), T0 + 1
    )
    w1 = connected(reg2, 1, T0, world=2)
    reg2.apply(w1, report(T0 + 1, phases=(phase("init", T0),)), T0 + 1)
    assert found(reg2, T0 + 200) == {}  # rank 1 alone in init; rank 0 in a long checkpoint


def test_analysis_names_the_rank_not_arrived_and_the_peers_waiting_for_it() -> None:
    reg = job({0: T0 + 10, 1: None, 2: T0 + 12})
    diag = analyze([summarize(w, T0 + 20, 1e6) for w in reg])
    assert diag.kind == STRAGGLER and diag.culprits == (1,) and diag.waiting == (0, 2)
    assert "rank 1 on node-a (pid 1001) has not reached init_process_group" in diag.summary
    assert diag.conclusive
    stuck = analyze([summarize(w, T0 + 200, 1e6) for w in job({0: T0, 1: T0, 2: T0})])
    assert stuck.kind == ALL_IN_FLIGHT and stuck.waiting == (0, 1, 2) and not stuck.culprits
    assert "init_process_group" in stuck.summary


def test_no_straggler_is_named_before_every_rank_of_the_world_has_connected() -> None:
    # World 4, rank 3 never connected: ranks 0 and 2 wait inside, rank 1 is still
    # before init. Rank 3 may be the one they all wait for (or may arrive last):
    # "the last peer arrived" cannot be judged while a rank is missing.
    reg = job({0: T0 + 1, 1: None, 2: T0 + 1}, world=4)
    assert found(reg, T0 + 7) == {}
    assert found(reg, T0 + 500) == {}  # however long (the start-up rule's 600 s applies)
    # Rank 3 connects (still in init): now the job is whole and rank 1 and 3 are named.
    w3 = connected(reg, 3, T0 + 40, world=4)
    reg.apply(w3, report(T0 + 40, phases=(phase("init", T0 + 40),)), T0 + 40)
    assert found(reg, T0 + 41) == {1: "init_straggler", 3: "init_straggler"}


def test_a_rank_whose_stream_ended_does_not_count_toward_the_world() -> None:
    reg = job({0: T0 + 1, 1: None, 2: T0 + 1, 3: None}, world=4)
    assert found(reg, T0 + 7) == {1: "init_straggler", 3: "init_straggler"}
    w3 = next(w for w in reg if w.hello.rank == 3)
    assert reg.close(w3, w3.generation, "vanished", T0 + 8, pid_alive=False)
    # Three of four connected: rank 3's exit is its own incident; rank 1 is not
    # judged against a world that is no longer whole.
    assert 1 not in found(reg, T0 + 9)


def join(
    reg: Registry, rank: int, arrived: float | None, verified: bool, world: int
) -> WorkerState:
    """A rank in phase init since T0 (and in rendezvous from ``arrived``), its pid
    verified by the kernel or only claimed (a TCP client with the token)."""
    h = hello(rank=rank, world=world)
    w = reg.open(h, T0, VerifiedProcess(h.pid, 1000, 1) if verified else None)
    phases = (phase("init", T0),)
    if arrived is not None:
        phases += (phase("rendezvous", arrived),)
    reg.apply(w, report(T0 + 30, phases=phases), T0 + 30)
    return w


def culprits(reg: Registry, now: float) -> tuple[int, ...]:
    return analyze([summarize(w, now, 1e6) for w in reg]).culprits


def test_an_unverified_claim_to_wait_in_the_rendezvous_never_makes_a_verified_rank_late() -> None:
    # A healthy verified rank 0 still loads before init_process_group; an unverified
    # client claims rank 1, "inside init_process_group" since long before.
    reg = Registry()
    join(reg, 0, None, verified=True, world=2)
    join(reg, 1, T0 - 50, verified=False, world=2)
    assert found(reg, T0 + 7) == {}
    assert found(reg, T0 + 500) == {}  # the start-up rule's 600 s alone applies
    assert 0 not in culprits(reg, T0 + 500)
    # A verified peer's arrival does make it late, as before.
    honest = Registry()
    join(honest, 0, None, verified=True, world=2)
    join(honest, 1, T0 + 1, verified=True, world=2)
    assert found(honest, T0 + 7) == {0: "init_straggler"}
    assert culprits(honest, T0 + 7) == (0,)


def test_an_unverified_session_does_not_complete_the_world_for_a_verified_rank() -> None:
    # World 3: verified rank 0 arrived, verified rank 1 still in init, rank 2 not yet
    # connected (it may be the one they wait for). An unverified client claims rank 2
    # so that the world looks whole and rank 1 looks like the one that never arrived.
    reg = Registry()
    join(reg, 0, T0 + 1, verified=True, world=3)
    join(reg, 1, None, verified=True, world=3)
    join(reg, 2, None, verified=False, world=3)
    assert 1 not in found(reg, T0 + 500)
    assert 1 not in culprits(reg, T0 + 500)
    # The liar is judged on its own claims (before init while a peer waits): only it.
    assert found(reg, T0 + 7) == {2: "init_straggler"} and culprits(reg, T0 + 7) == (2,)
    # Once the real rank 2 connects (verified), still in init, the job is whole.
    real = Registry()
    join(real, 0, T0 + 1, verified=True, world=3)
    join(real, 1, None, verified=True, world=3)
    join(real, 2, None, verified=True, world=3)
    assert found(real, T0 + 7) == {1: "init_straggler", 2: "init_straggler"}
    assert culprits(real, T0 + 7) == (1, 2)


def past_the_group(
    waiting: dict[int, float], world: int = 3, verified: bool = True, watch: bool = False
) -> Registry:
    """Ranks past init_process_group (under Ray Train it was made before any hook,
    so no start-up phase), connected at T0 and before their first step; those in
    ``waiting`` wait in their first allreduce since the time given, the others in
    no collective. Reports at T0 + 30. ``watch``: each is a start-up hook's
    session (``Hello.startup_watch``)."""
    reg = Registry()
    for rank in range(world):
        h = dataclasses.replace(hello(rank=rank, world=world), startup_watch=watch)
        w = reg.open(h, T0, VerifiedProcess(h.pid, 1000, 1) if verified else None)
        since = waiting.get(rank)
        groups = (
            () if since is None else (GroupSeqData("0", 1, 0, int(since * 1e9), "allreduce", 1),)
        )
        reg.apply(w, report(T0 + 30, sync=SyncData(groups=groups)), T0 + 30)
    return reg


def test_past_the_group_the_rank_in_no_collective_is_named_straggler_s_after_its_peers_waited() -> (
    None
):
    # Ray Train's restarted group: rank 1 hangs after its hook, before its first
    # step; ranks 0 and 2 wait in that step's allreduce. Named in seconds, as
    # init_straggler is before the group, not startup_timeout_s (600 s) after.
    reg = past_the_group({0: T0 + 10, 2: T0 + 12})
    assert found(reg, T0 + 16.9) == {}  # 4.9 s after the last began waiting: not yet
    (hung,) = evaluate(reg, CFG, T0 + 17.5)
    assert (hung.key.rank, hung.rule, hung.verdict) == (1, "startup_straggler", Verdict.HUNG)
    assert hung.evidence["waiting"] == [0, 2] and hung.evidence["waited_s"] == 5.5
    # The onset is when the last peer began waiting (waited_s), not its connect
    # (connected_s): the kill counts the start-up patience from there.
    assert hung.evidence["connected_s"] == 17.5 and "elapsed_s" not in hung.evidence
    diag = analyze([summarize(w, T0 + 17.5, 1e6) for w in reg])
    assert diag.kind == STRAGGLER and diag.culprits == (1,) and diag.waiting == (0, 2)
    # Nobody waits in a collective: each rank is in its own start-up (600 s).
    assert found(past_the_group({}), T0 + 500) == {}
    # Every rank waits: the collective is stuck, no rank is late.
    assert found(past_the_group({0: T0 + 1, 1: T0 + 1, 2: T0 + 1}), T0 + 500) == {}


def test_past_the_group_no_straggler_is_named_while_a_rank_of_the_world_is_missing() -> None:
    # Rank 2 never connected (hung before its hook, or on another node not yet
    # heard): it may be the one rank 0 waits for, so rank 1 is not named late.
    reg = past_the_group({0: T0 + 1}, world=3)
    w2 = next(w for w in reg if w.hello.rank == 2)
    assert reg.close(w2, w2.generation, "vanished", T0 + 2, pid_alive=False)
    assert 1 not in found(reg, T0 + 500)
    # An unverified client's claim to wait makes no verified rank late.
    liar = past_the_group({}, world=2)
    h = hello(rank=1, world=2, pid=4242)
    w = next(w for w in liar if w.hello.rank == 1)
    assert liar.close(w, w.generation, "vanished", T0 + 1, pid_alive=False)
    w = liar.open(h, T0 + 2)
    groups = (GroupSeqData("0", 1, 0, int((T0 + 2) * 1e9), "allreduce", 1),)
    liar.apply(w, report(T0 + 30, sync=SyncData(groups=groups)), T0 + 30)
    assert 0 not in found(liar, T0 + 100)


def test_a_start_up_watch_is_judged_on_evidence_alone() -> None:
    # Importing a framework callback keeps a start-up hook past the process
    # group; a script that then never uses the callback never steps, and no
    # timeout without evidence may call it hung (it would kill a healthy job).
    assert found(past_the_group({}, watch=True), T0 + 5000) == {}
    assert found(past_the_group({}), T0 + 601) == {0: "startup", 1: "startup", 2: "startup"}
    # Peers seen waiting in their first collective are evidence: named in seconds.
    reg = past_the_group({0: T0 + 10, 2: T0 + 12}, watch=True)
    (hung,) = evaluate(reg, CFG, T0 + 17.5)
    assert (hung.key.rank, hung.rule, hung.verdict) == (1, "startup_straggler", Verdict.HUNG)
    # Before the group it is judged as a plain hook made first thing is.
    reg = Registry()
    for rank, arrived in {0: T0 + 1, 1: None, 2: T0 + 1}.items():
        h = dataclasses.replace(hello(rank=rank, world=3), startup_watch=True)
        w = reg.open(h, T0)
        phases = (phase("init", T0),) + (() if arrived is None else (phase("rendezvous", arrived),))
        reg.apply(w, report(T0 + 30, phases=phases), T0 + 30)
    assert found(reg, T0 + 7) == {1: "init_straggler"}
    # A watch whose process died is dead like any session.
    reg = past_the_group({}, world=2, watch=True)
    w0 = next(w for w in reg if w.hello.rank == 0)
    assert reg.close(w0, w0.generation, "vanished", T0 + 31, pid_alive=False)
    assert found(reg, T0 + 32) == {0: "exit"}
