"""A paused job is not a hang: the pure half, with a fake clock.

Every rank held at once (SIGSTOP of the whole job, a cgroup freezer) is a
pause: no kill, and no clock of the job counts the time it was held. One
rank held while a peer runs and waits is a hang, its culprit definitive.
"""

from __future__ import annotations

from tests.core_builders import connected, fired, lockstep, report
from trainprobe.sidecar.core.hang.pause import pause_check, paused_line, paused_reason
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.judge.culprit import RankSummary
from trainprobe.sidecar.core.judge.decision import judge, refine, stuck_sweep_s
from trainprobe.sidecar.core.judge.evidence import (
    ProcSample,
    RankEvidence,
    assess,
    definitive_reason,
)
from trainprobe.sidecar.core.session import Registry, StallPolicy

T0 = 100.0
CFG = RuleConfig(heartbeat_timeout_s=3.0, stall=StallPolicy(timeout_s=2.0))


def ev(rank: int, state: str, frozen: bool | None = None) -> RankEvidence:
    return RankEvidence(rank=rank, state=state, frozen=frozen, reporter_alive=False)


def summary(rank: int, reporting: bool, ended: str = "") -> RankSummary:
    return RankSummary(rank=rank, world_size=4, reporting=reporting, ended=ended)


def test_every_rank_stopped_is_paused() -> None:
    evidence = {0: ev(0, "stopped"), 1: ev(1, "stopped")}
    why = paused_reason(evidence, [summary(0, False), summary(1, False)])
    assert "paused" in why and "stopped by SIGSTOP" in why and "[0, 1]" in why
    assert paused_line(why, 15.2).startswith("PAUSED 15 s — every live rank is held")


def test_a_stopped_rank_whose_peer_runs_is_no_pause_and_stays_definitive() -> None:
    evidence = {0: ev(0, "sleeping"), 1: ev(1, "stopped")}
    assert paused_reason(evidence, [summary(0, True), summary(1, False)]) == ""
    assert definitive_reason(evidence[1]) == "stopped"


def test_a_peer_seen_only_by_its_reports_decides_too() -> None:
    """A rank of another host (no /proc here): reporting means it runs."""
    evidence = {0: ev(0, "stopped"), 1: ev(1, "")}
    assert paused_reason(evidence, [summary(0, False), summary(1, True)]) == ""
    # Silent, and its node's word may still be on its way: no pause yet, and it waits.
    assert pause_check(evidence, [summary(0, False), summary(1, False)], {1}) == ("", [1])
    # Another sidecar's rank that still reports (a Ray job on two nodes).
    assert paused_reason({0: ev(0, "stopped")}, [summary(0, False), summary(3, True)]) == ""


def test_a_sampled_rank_nobody_says_is_held_runs() -> None:
    """Silent with no word (a relayed rank whose node had its time and saw it run,
    an unverified session nobody's kernel speaks for): it runs, so a held rank
    beside it, made up or real, is no pause."""
    silent = [summary(0, False), summary(1, False), summary(2, False)]
    evidence = {0: ev(0, ""), 1: ev(1, ""), 2: ev(2, "stopped")}
    assert pause_check(evidence, silent) == ("", [])
    assert pause_check(evidence, silent, {0}) == ("", [])  # rank 1 runs anyway
    assert pause_check(evidence, silent, {0, 1}) == ("", [0, 1])  # the pause hinges on them
    # Every word in: a pause.
    held = {**evidence, 0: ev(0, "stopped"), 1: ev(1, "traced")}
    assert "ranks [0, 1, 2]" in pause_check(held, silent)[0]
    # A rank whose stream ended, with nothing read of it, counts neither way.
    gone = [summary(0, False, ended="relay_lost"), *silent[1:]]
    assert "ranks [1, 2]" in paused_reason({**held, 0: ev(0, "")}, gone)


def test_silent_ranks_stuck_beside_a_stopped_one_are_swept_when_their_patience_is_spent() -> None:
    from trainprobe.sidecar.core.judge.culprit import Diagnosis

    diag = Diagnosis(kind="unresponsive", culprits=(2,), confidence=0.5, summary="")
    waiting = RankEvidence(3, state="sleeping", activity="collective", reporter_alive=False)
    evidence = {
        0: ev(0, ""),  # silent, no word: stuck on its own
        1: ev(1, "sleeping"),  # silent, /proc says asleep, no stack: stuck on its own
        2: ev(2, "stopped"),
        3: waiting,  # silent but waiting in a collective: waits for rank 2
        4: RankEvidence(4, state="running", reporter_alive=True),  # reports: runs
        5: ev(5, "traced"),  # held, not stopped: a person may be looking at it
        6: ev(6, ""),  # its node's word may still be on its way
    }
    got = refine(diag, evidence, awaiting={6})
    assert got.culprits == (2,) and got.waiting == (3,)
    assert got.evidence["stuck"] == [0, 1] and "stuck on their own" in got.summary
    # Killed at once, as ever; the stuck ranks swept once their patience is spent.
    j = judge(got, evidence, onset_at=10.0, patience_s=90.0, patience_basis="", now=40.0)
    assert (j.act, j.rule) == (True, "stopped")
    # Their patience counts from when they went silent (rank 0 at 15, rank 1 at 20).
    silent = [RankSummary(r, 8, reporting=False, report_age_s=a) for r, a in ((0, 25), (1, 20))]
    assert stuck_sweep_s(got, j, silent, 40.0) == 65.0  # 15 + 90 - 40
    assert stuck_sweep_s(got, j, [], 40.0) == 60.0  # no summary: the episode's onset
    # Without silent ranks beside it, the stopped rank alone, as before.
    alone = refine(diag, {2: evidence[2], 3: waiting, 4: evidence[4]})
    assert alone.culprits == (2,) and "stuck" not in alone.evidence
    assert stuck_sweep_s(alone, j, silent, 40.0) is None


def test_a_report_that_left_before_the_stop_does_not_count_for_the_held_rank() -> None:
    assert paused_reason({0: ev(0, "stopped")}, [summary(0, True)]) != ""


def test_frozen_ranks_are_paused_whatever_their_proc_state() -> None:
    # cgroup v2 freezes into S, v1 into D: the freezer's word decides.
    evidence = {0: ev(0, "sleeping", frozen=True), 1: ev(1, "disk", frozen=True)}
    why = paused_reason(evidence, [])
    assert "frozen by a cgroup freezer" in why
    # Frozen is not the kernel's proof of a hang: a freezer is a pause.
    assert definitive_reason(evidence[0]) == ""
    assert not evidence[0].waiting and evidence[0].label == "frozen (cgroup freezer)"
    # One rank frozen while a peer runs: no pause (and judged as ambiguous).
    assert paused_reason({0: ev(0, "sleeping", True), 1: ev(1, "running", False)}, []) == ""


def test_ranks_that_are_over_count_neither_way() -> None:
    evidence = {0: ev(0, "stopped"), 1: ev(1, "gone"), 2: ev(2, "zombie")}
    assert paused_reason(evidence, [summary(1, False, ended="vanished")]) != ""
    assert paused_reason({1: ev(1, "gone")}, []) == ""
    assert paused_reason({}, []) == ""


def test_a_debuggers_stop_of_every_rank_is_paused() -> None:
    assert "stopped by a tracer" in paused_reason({0: ev(0, "traced"), 1: ev(1, "traced")}, [])


def test_assess_carries_the_freezer_state_of_the_last_sample() -> None:
    procs = [ProcSample(1.0, "S", 10, frozen=False), ProcSample(2.0, "S", 10, frozen=True)]
    got = assess(0, procs, [], reporter_alive=False)
    assert got.frozen is True and got.held and got.to_record()["frozen"] is True
    assert assess(0, procs[:1], [], reporter_alive=True).held is False


def test_resume_restarts_every_clock_of_the_job_at_the_resume() -> None:
    reg = Registry()
    lockstep(reg, 2, T0 + 5)  # last step and report at T0+5
    other = connected(reg, 0, T0, job="other")
    reg.apply(other, report(T0 + 5, step=50, seq=50), T0 + 5)
    held_until = T0 + 20  # the whole job was stopped 15 s
    # Without the resume, both ranks read as silent for 15 s.
    assert fired(evaluate(reg, CFG, held_until)) >= {(0, "heartbeat"), (1, "heartbeat")}
    reg.resume_job("job", held_until)
    # Silence counts from the resume; nothing else is judged before a fresh report.
    assert [f for f in evaluate(reg, CFG, held_until + 1) if f.key.job_id == "job"] == []
    # Their first reports after the resume still carry the step of before the stop:
    # the stall clock restarted at the resume, so no stall yet...
    for w in list(reg):
        if w.hello.job_id == "job":
            reg.apply(
                w, report(held_until + 0.5, step=50, step_t_s=T0 + 5, seq=60), held_until + 0.5
            )
    assert [f for f in evaluate(reg, CFG, held_until + 1.5) if f.key.job_id == "job"] == []
    # ...but it runs from there: a job that does not step again is stalled 2 s later.
    for w in list(reg):
        if w.hello.job_id == "job":
            reg.apply(
                w, report(held_until + 2.4, step=50, step_t_s=T0 + 5, seq=61), held_until + 2.4
            )
    found = {r for r, rule in fired(evaluate(reg, CFG, held_until + 2.5)) if rule == "stall"}
    assert found == {0, 1}
    # Another job's clocks are its own.
    assert other.last_phase_end_at == 0.0 and other.fresh_after == 0.0


# -- every live local rank of the job counts, not only the 8 a round samples --------


def _ten_local(held: int, kernel: dict[int, str] | None = None) -> list[object]:
    """Ranks 0-9 verified on this host, silent since T0+4; the first ``held``
    stopped (SIGSTOP), the rest hung silently (a C call holding the GIL: /proc
    shows them running). The round at T0+6.6 samples ranks 0-7 (MAX_INSPECTED);
    ``kernel``: the engine's read of the others' /proc state letter. The
    effects of that round and of a tick, patience 0."""
    from tests.unit.test_hang_machine import machine, tick
    from trainprobe.sidecar.core.hang import step
    from trainprobe.sidecar.core.hang.effects import EvidenceRound, Watch
    from trainprobe.sidecar.core.hang.state import plan_round

    now = T0 + 6.6
    state, reg = machine(), Registry()
    ws = [connected(reg, r, T0, world=10, interval_ms=100) for r in range(10)]
    for w in ws:
        w.verified = w.local = True  # an identity ticket here: /proc speaks for it
        reg.apply(w, report(T0 + 4.0, step=5, step_t_s=T0 + 1), T0 + 4.0)
    (watch,) = [e for e in tick(state, reg, T0 + 5.0) if isinstance(e, Watch)]
    plan = plan_round(state, watch.episode, reg.workers(), watch.round)
    assert plan is not None and {w.hello.rank for w in plan.states} == set(range(8))
    letter = {r: "T" if r < held else "R" for r in range(10)}
    evidence = {
        w.hello.rank: assess(
            w.hello.rank,
            [ProcSample(now - 0.3, letter[w.hello.rank]), ProcSample(now, letter[w.hello.rank])],
            [],
            False,
        )
        for w in plan.states
    }
    assert [w.hello.rank for w in plan.others] == [8, 9]  # only their state is read
    read = {r: assess(r, [ProcSample(now, how)], [], False) for r, how in (kernel or {}).items()}
    rnd = EvidenceRound(
        watch.episode, watch.incident, watch.round, plan.states, evidence, kernel=read
    )
    return [*step(state, reg.workers(), None, (rnd,), now)[1], *tick(state, reg, now)]


def test_a_silent_local_rank_past_the_sampled_eight_is_not_masked() -> None:
    """An episode samples at most 8 ranks (MAX_INSPECTED), culprits first: 8
    local ranks stopped do not make the silent hang of local ranks 8 and 9 a
    pause. The engine reads the state of every other live local rank of the
    job (one /proc read each, no stacks); a rank it could not read runs."""
    from tests.unit.test_held_relay import _kills, _paused

    running = {8: "R", 9: "R"}
    for held in (_ten_local(8), _ten_local(8, running)):
        assert _paused(held) == []
        # The stopped ranks at once; ranks 8 and 9 stuck beside them, swept when
        # their patience (0 here) is spent, as they would be killed without them.
        assert _kills(held) == {
            **{r: "stopped" for r in range(8)},
            8: "stuck_beside_stopped",
            9: "stuck_beside_stopped",
        }
    # Every rank stopped, the last two read past the sample: a pause, as it is.
    paused = _ten_local(10, {8: "T", 9: "T"})
    assert _kills(paused) == {} and "ranks [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in _paused(paused)[0]


# -- another Ray node's ranks count by that node's kernel's word -----------------------


def _two_nodes(word: str, now: float, age_s: float = 0.4) -> list[object]:
    """Rank 0 here (verified, SIGSTOPped: silent since T0+4); rank 1 served by
    another sidecar (Ray's per-node sidecars), silent since T0+4 too, known
    only by its summary through the job's coordinator, with its sidecar's
    ``word`` on it ("" unread), read ``age_s`` ago. The effects of one evidence round at ``now``
    (and a tick), patience 0, heartbeat limit 2 s."""
    from tests.unit.test_hang_machine import tick
    from trainprobe.sidecar.core.hang import (
        CulpritPolicy,
        HangConfig,
        HangState,
        PatienceBook,
        step,
    )
    from trainprobe.sidecar.core.hang.effects import EvidenceRound, Watch
    from trainprobe.sidecar.core.hang.state import plan_round
    from trainprobe.sidecar.core.incident import ActionPolicy
    from trainprobe.sidecar.core.job import JobView, SyncReply

    rules = RuleConfig(stall=StallPolicy(timeout_s=3.0), heartbeat_timeout_s=2.0)
    view = JobView()
    config = HangConfig(rules, ActionPolicy(), CulpritPolicy("kill_stalled", 60.0), "node-a")
    state, reg = HangState.new(config, PatienceBook(setting_s=0.0), view), Registry()
    w = connected(reg, 0, T0, world=2, interval_ms=100)
    w.verified = w.local = True
    reg.apply(w, report(T0 + 4.0, step=5, step_t_s=T0 + 1), T0 + 4.0)
    extra = {"kernel": word, "kernel_age_s": age_s} if word else {}
    theirs = RankSummary(
        rank=1,
        world_size=2,
        reporting=False,
        report_age_s=round(now - T0 - 4.0, 3),
        has_step=True,
        step=5,
        step_age_s=round(now - T0 - 1.0, 3),
        verified=True,
        **extra,  # type: ignore[arg-type]
    )
    view.update("job", SyncReply(((theirs, 0.0),), None), now)
    (watch,) = [e for e in tick(state, reg, T0 + 4.2) if isinstance(e, Watch)]
    plan = plan_round(state, watch.episode, reg.workers(), watch.round)
    assert plan is not None and [s.hello.rank for s in plan.states] == [0]
    stopped = assess(0, [ProcSample(now - 0.3, "T"), ProcSample(now, "T")], [], False)
    rnd = EvidenceRound(watch.episode, watch.incident, watch.round, plan.states, {0: stopped})
    return [*step(state, reg.workers(), None, (rnd,), now)[1], *tick(state, reg, now)]


def test_a_held_rank_here_never_makes_another_ray_nodes_silent_rank_a_pause() -> None:
    """Ray's per-node sidecars: the sidecar of rank 1 reads it once it is silent
    and its summary carries the kernel's word (RankSummary.kernel). Rank 0 here
    is stopped; rank 1 on the other node hangs silently (its kernel: running).
    A pause needs every rank held on a kernel's word: a silent rank of another
    node with no word runs once its sidecar had its time to speak (2 s
    heartbeat + 2 s), so the stopped rank is killed at once, as in relay mode.
    Before, rank 1 counted by its reports alone (silent: neither way) and the
    job was 'paused'."""
    from tests.unit.test_held_relay import _kills, _paused

    late = _two_nodes("", T0 + 8.5)  # no word 4.5 s after its last report
    assert _paused(late) == [] and _kills(late) == {0: "stopped"}
    ran = _two_nodes("running", T0 + 5.0)  # its sidecar read it running
    assert _paused(ran) == [] and _kills(ran) == {0: "stopped"}
    # Its word may still be on its way: neither a pause nor a kill yet.
    early = _two_nodes("", T0 + 5.0)
    assert _paused(early) == [] and _kills(early) == {}
    # Held on both nodes, each on its kernel's word: a pause.
    for how in ("stopped", "traced", "frozen"):
        both = _two_nodes(how, T0 + 5.0)
        assert _kills(both) == {} and "ranks [0, 1]" in _paused(both)[0], how
    # A word too old to mean anything now is no word (its sidecar went quiet).
    stale = _two_nodes("stopped", T0 + 8.5, age_s=4.5)
    assert _paused(stale) == [] and _kills(stale) == {0: "stopped"}
