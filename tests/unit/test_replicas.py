"""Replicated jobs (torchft) in the pure core: culprit replica, spared waiters, evict, patience."""

from __future__ import annotations

from trainprobe.sidecar.core.hang.episodes import CulpritPolicy, plan_targets
from trainprobe.sidecar.core.hang.patience import (
    BACKOFF_WINDOW_S,
    MAX_BACKOFF_S,
    REPLICA_FLOOR_S,
    PatienceBook,
)
from trainprobe.sidecar.core.incident.actions import (
    ACTIONS,
    Action,
    eviction_line,
    for_replicas,
    is_destructive,
)
from trainprobe.sidecar.core.job.view import analyze_job
from trainprobe.sidecar.core.judge.culprit import (
    INCONCLUSIVE,
    STRAGGLER,
    UNRESPONSIVE,
    Diagnosis,
    GroupProgress,
    RankSummary,
    analyze,
)
from trainprobe.sidecar.core.judge.replicas import (
    apply_replicas,
    culprit_onset,
    replica_evidence,
    stepping,
)


def rank(
    r: int,
    replica: str,
    wait: str = "",
    *,
    world: int = 2,
    step: int = 10,
    step_age: float = 9.0,
    reporting: bool = True,
    inflight: bool = False,
    phases: tuple[str, ...] = (),
    verified: bool = True,
    normal: float = 0.0,
) -> RankSummary:
    groups = (
        GroupProgress("torchft", step + 1, step, 9.0, "allreduce", step + 1)
        if inflight
        else GroupProgress("torchft", step, step),
    )
    return RankSummary(
        rank=r,
        world_size=world,
        pid=1000 + r,
        reporting=reporting,
        report_age_s=0.2 if reporting else 6.0,
        has_step=True,
        step=step,
        step_age_s=step_age,
        phases=phases,
        groups=groups,
        verdict="HUNG",
        replica=replica,
        ft_wait=wait,
        ft_wait_age_s=9.0 if wait else 0.0,
        verified=verified,
        normal_step_s=normal,
    )


def test_the_replica_that_stopped_is_the_culprit_and_the_waiting_one_is_spared() -> None:
    ranks = [rank(0, "train_0", "quorum"), rank(1, "train_1")]
    diag = analyze_job(ranks)
    assert diag.kind == STRAGGLER
    assert diag.culprits == (1,)
    assert diag.waiting == (0,)
    rep = replica_evidence(diag.evidence)
    assert rep is not None
    assert rep.culprits == ("train_1",) and rep.waiting == ("train_0",)
    assert rep.survivors == 1
    assert "replica train_1" in diag.summary and "quorum" in diag.summary


def test_a_group_of_two_ranks_is_named_whole_and_targeted_whole() -> None:
    # Replica A = ranks 0,1 waits in the allreduce; replica B = ranks 2,3: rank 2
    # sleeps, rank 3 waits for it inside its own group's collective.
    ranks = [
        rank(0, "A", "allreduce", world=4, inflight=True),
        rank(1, "A", "allreduce", world=4, inflight=True),
        rank(2, "B", world=4),
        rank(3, "B", "allreduce", world=4, inflight=True),
    ]
    diag = analyze_job(ranks)
    assert diag.culprits == (2,)
    assert set(diag.waiting) == {0, 1}
    targets, why = plan_targets(diag, {0, 1, 2, 3}, {0, 1, 2, 3}, CulpritPolicy())
    assert targets == [2, 3]
    assert "evicted whole" in why


def test_collectives_alone_would_blame_a_waiting_replica_but_never_do() -> None:
    # The sequence numbers say rank 0 is behind (a newcomer at 0 issued); its hook
    # says it waits in torchft's quorum: it is never the culprit.
    newcomer = rank(0, "train_0", "quorum", step=0)
    survivor = rank(1, "train_1", "allreduce", inflight=True)
    base = analyze([newcomer, survivor])
    assert 0 in base.culprits  # what the rank-level analysis alone says
    diag = analyze_job([newcomer, survivor])
    assert 0 not in diag.culprits and 1 not in diag.culprits
    assert set(diag.waiting) == {0, 1}
    targets, _ = plan_targets(diag, {0, 1}, {0, 1}, CulpritPolicy("kill_stalled"))
    assert targets == []


def test_a_stopped_rank_whose_last_report_said_waiting_is_the_culprit() -> None:
    ranks = [rank(0, "train_0", "allreduce", inflight=True), rank(1, "train_1", "allreduce")]
    assert not analyze_job(ranks).culprits  # both say they wait
    diag = apply_replicas(ranks, analyze(ranks), dead={1})
    assert diag.kind == UNRESPONSIVE
    assert diag.culprits == (1,)
    assert replica_evidence(diag.evidence).culprits == ("train_1",)  # type: ignore[union-attr]


def test_a_replica_in_a_declared_phase_is_not_a_culprit() -> None:
    ranks = [rank(0, "train_0", "quorum"), rank(1, "train_1", phases=("checkpoint",))]
    diag = analyze_job(ranks)
    rep = replica_evidence(diag.evidence)
    assert rep is not None and rep.culprits == ()
    assert 0 not in diag.culprits


def test_a_silent_replica_is_the_culprit() -> None:
    ranks = [rank(0, "train_0", "quorum"), rank(1, "train_1", reporting=False)]
    diag = analyze_job(ranks)
    assert diag.kind == UNRESPONSIVE
    assert diag.culprits == (1,)


def test_jobs_without_replicas_are_unchanged() -> None:
    plain = [rank(0, ""), rank(1, "", inflight=True)]
    assert analyze_job(plain) == analyze(plain)
    one = [rank(0, "only"), rank(1, "only", inflight=True)]
    assert analyze_job(one) == analyze(one)
    d = Diagnosis(INCONCLUSIVE)
    assert apply_replicas(plain, d) is d


def test_evict_is_named_once_and_replaces_kills_on_replicated_jobs_only() -> None:
    assert "evict" in ACTIONS
    assert is_destructive(Action.EVICT)
    assert for_replicas(Action.KILL, True) == Action.EVICT
    assert for_replicas(Action.RESTART, True) == Action.EVICT
    assert for_replicas(Action.OBSERVE, True) == Action.OBSERVE
    assert for_replicas(Action.DUMP, True) == Action.DUMP
    assert for_replicas(Action.EVICT, False) == Action.KILL
    assert for_replicas(Action.KILL, False) == Action.KILL
    assert eviction_line(["train_1"], 2) == "replica train_1 evicted; 2 replicas go on"
    assert eviction_line(["train_1"], 1) == "replica train_1 evicted; 1 replica goes on"


def test_replicated_patience_acts_before_torchft_timeouts_and_backs_off() -> None:
    book = PatienceBook()
    s, basis = book.replica_patience_s("job", "train.py:40", 100.0)
    assert s == REPLICA_FLOOR_S == 10.0
    assert "replicated" in basis
    # An 8 s stall (about 8.1 s from the last step's end) is spared with 1.5 s to spare,
    # and the eviction comes well before torchft's first timeout (30 s for gloo).
    assert 8.0 + 1.5 < REPLICA_FLOOR_S <= 30.0 - 15.0
    book.record("job", 11.0, "train.py:40", "sleep", 50.0)
    assert book.replica_patience_s("job", "x", 100.0)[0] == 22.0
    # Non-replicated jobs keep today's rules.
    assert book.patience_s("job")[0] == 90.0
    fresh = PatienceBook()
    fresh.record_eviction("job", "train.py:40", 100.0)
    s1, why = fresh.replica_patience_s("job", "train.py:40", 120.0)
    assert s1 == 20.0 and "evicted 1 time" in why
    fresh.record_eviction("job", "train.py:40", 130.0)
    assert fresh.replica_patience_s("job", "train.py:40", 140.0)[0] == 40.0
    assert fresh.replica_patience_s("job", "elsewhere.py:3", 140.0)[0] == 10.0
    assert fresh.replica_patience_s("other", "train.py:40", 140.0)[0] == 10.0
    for i in range(10):
        fresh.record_eviction("job", "train.py:40", 150.0 + i)
    assert fresh.replica_patience_s("job", "train.py:40", 200.0)[0] == MAX_BACKOFF_S
    assert fresh.replica_patience_s("job", "train.py:40", 160.0 + BACKOFF_WINDOW_S)[0] == 10.0
    assert PatienceBook(replica_setting_s=5.0).replica_patience_s("j", "", 0.0)[0] == 5.0


def test_a_thread_waiting_inside_torchft_counts_as_a_collective_wait() -> None:
    from trainprobe.sidecar.core.judge.evidence import COLLECTIVE, classify_frames
    from trainprobe.sidecar.core.judge.stackframes import Frame

    sp = "/venv/lib/python3.11/site-packages"
    frames = [  # innermost first: the quorum future's wait, called from training
        Frame("/usr/lib/python3.11/threading.py", 320, "wait"),
        Frame(f"{sp}/torchft/manager.py", 627, "wait_quorum"),
        Frame(f"{sp}/trainprobe/hooks/torchft.py", 188, "ft_comm_hook"),
        Frame("/work/train.py", 40, "main", "loss.backward()"),
    ]
    assert classify_frames(frames) == COLLECTIVE


def stepper(r: int, replica: str, step: int = 95, world: int = 6) -> RankSummary:
    """A verified rank that steps: its last step 0.1 s ago, its normal step time 1 s."""
    return rank(r, replica, world=world, step=step, step_age=0.1, normal=1.0)


def liars(frozen_in: str) -> list[RankSummary]:
    """An unverified client's two sessions: one claims replica ``frozen_in`` with a
    frozen step, not inside torchft; one a third replica waiting in torchft's quorum."""
    return [
        rank(4, frozen_in, world=6, step=5, verified=False),
        rank(5, "train_2", "quorum", world=6, step=5, verified=False),
    ]


def test_an_unverified_sessions_replica_claims_form_no_group_and_wait_for_no_one() -> None:
    healthy = [stepper(0, "train_0"), stepper(1, "train_0", 94), stepper(2, "train_1")]
    healthy.append(stepper(3, "train_1", 94))
    diag = analyze_job([*healthy, *liars("train_1")])
    rep = replica_evidence(diag.evidence)
    assert rep is not None
    assert rep.groups == {"train_0": (0, 1), "train_1": (2, 3)}
    assert rep.culprits == () and rep.waiting == ()
    assert not set(diag.culprits) & {0, 1, 2, 3}, diag.summary
    for policy in (CulpritPolicy(), CulpritPolicy("kill_stalled")):
        targets, why = plan_targets(diag, range(6), {4, 5}, policy)
        assert not set(targets) & {0, 1, 2, 3}, why


def test_a_rank_that_steps_normally_is_never_a_culprit_whatever_else_it_reports() -> None:
    # A plain job's instant picture: rank 1 hung one step ahead of rank 0, which steps.
    ranks = [stepper(0, "", 94, world=2), rank(1, "", step=95)]
    assert analyze(ranks).culprits == (0,)  # the rank-level analysis alone
    diag = analyze_job(ranks)
    assert diag.culprits == () and diag.evidence["stepping"] == [0]
    # A verified replica that steps is no culprit replica, though it is not in torchft...
    ranks = [rank(0, "train_0", "quorum"), rank(1, "train_1", step_age=0.3, normal=1.0)]
    diag = analyze_job(ranks)
    assert replica_evidence(diag.evidence).culprits == () and not diag.culprits  # type: ignore[union-attr]
    # ...until its last step is older than its normal step time,
    late = [rank(0, "train_0", "quorum"), rank(1, "train_1", step_age=1.5, normal=1.0)]
    assert analyze_job(late).culprits == (1,)
    # or the kernel shows it stopped, whatever its last report said.
    assert apply_replicas(ranks, analyze(ranks), dead={1}).culprits == (1,)


def test_a_real_hang_in_one_replica_evicts_that_replica_alone_whatever_the_liars_say() -> None:
    # train_1's rank 2 hangs, its rank 3 waits in the replicated allreduce; train_0
    # waits in the quorum. The liars claim a frozen rank in train_0 and a third replica.
    ranks = [
        rank(0, "train_0", "quorum", world=6),
        rank(1, "train_0", "quorum", world=6),
        rank(2, "train_1", world=6),
        rank(3, "train_1", "allreduce", world=6, inflight=True),
        *liars("train_0"),
    ]
    diag = analyze_job(ranks)
    rep = replica_evidence(diag.evidence)
    assert rep is not None and rep.culprits == ("train_1",) and rep.waiting == ("train_0",)
    assert diag.culprits == (2,)
    targets, _ = plan_targets(diag, range(6), set(range(6)), CulpritPolicy("kill_stalled"))
    assert targets == [2, 3]


def test_the_normal_step_time_is_the_ranks_own_and_ages_on_the_clock() -> None:
    from tests.core_builders import hello, report
    from trainprobe.sidecar.core.judge.summary import summarize
    from trainprobe.sidecar.core.session import Registry
    from trainprobe.sidecar.core.session.model import VerifiedProcess

    t0, reg = 100.0, Registry()
    mine = reg.open(hello(rank=0, interval_ms=100), t0, VerifiedProcess(1000, 1000, 1))
    other = reg.open(hello(rank=1, interval_ms=100), t0)  # unverified: a claim
    for i in range(1, 31):  # 0.1 s steps, one report each
        at = t0 + 0.1 * i
        reg.apply(mine, report(at, step=i, seq=i, durations=(0.1,)), at)
        reg.apply(other, report(at, step=i, seq=i, durations=(5.0,)), at)
    now = t0 + 3.0
    s = summarize(mine, now, 10.0)
    assert s.verified and s.normal_step_s == 2.0  # the floor: 2 x (0.1 + 0.1) is less
    assert stepping(s) and stepping(summarize(mine, now + 1.9, 10.0))
    assert not stepping(summarize(mine, now + 2.1, 10.0))
    # Another rank's slow steps do not lengthen this one's normal step time.
    o = summarize(other, now, 10.0)
    assert not o.verified and abs(o.normal_step_s - 10.2) < 0.01  # 2 x (5 + 0.1)
    assert not stepping(summarize(mine, now + 11.0, 10.0))  # silent: not reporting


def test_a_stall_that_begins_in_an_open_episode_gets_its_own_patience() -> None:
    # An episode opened at t=100 by a liar's frozen step; at t=130 train_1 has been
    # stuck 4 s: its patience counts from t=126, not from the episode's onset.
    ranks = [rank(0, "train_0", "quorum"), rank(1, "train_1", step_age=4.0), *liars("train_0")]
    diag = analyze_job(ranks)
    assert diag.culprits == (1,)
    assert culprit_onset(ranks, diag, 100.0, 130.0) == 126.0
    # Never before the episode's own onset; no named culprit keeps it.
    assert culprit_onset(ranks, diag, 128.0, 130.0) == 128.0
    assert culprit_onset(ranks, Diagnosis(INCONCLUSIVE), 100.0, 130.0) == 100.0


def test_a_made_up_replica_in_the_lighthouses_quorum_evicts_no_real_one() -> None:
    """Any local user can reach torchft's lighthouse (no auth) and put a made-up
    replica into the quorum: every real replica then waits for it in the quorum
    or its store. The made-up one has no session here, so no real replica is the
    culprit, and none is evicted (nor told to abort its group): torchft's own
    timeout ends the wait (docs/SECURITY.md, trainprobe run's limits)."""
    ranks = [
        rank(0, "train_0", "quorum"),
        rank(1, "train_1", "quorum"),
        rank(2, "train_2", "quorum"),
    ]
    diag = analyze_job(ranks)
    assert diag.culprits == ()
    assert set(diag.waiting) == {0, 1, 2}
    rep = replica_evidence(diag.evidence)
    assert (
        rep is not None and rep.culprits == () and rep.waiting == ("train_0", "train_1", "train_2")
    )
    targets, _ = plan_targets(diag, {0, 1, 2}, {0, 1, 2}, CulpritPolicy())
    assert targets == []
