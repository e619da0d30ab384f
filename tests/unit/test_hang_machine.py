"""The hang machine alone: plain data in, effects out, time passed by hand.

Nothing is applied here: no registry writer, no log, no action runner. Each
test steps :func:`trainprobe.sidecar.core.hang.machine.step` with sessions built in a
real registry (only to fold reports the way the sidecar does), the rules'
own findings and hand-made evidence rounds, and reads the effects it returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import replace

from tests.core_builders import connected, hello, report
from tests.unit.test_engine import seq
from trainprobe.sidecar.core.hang import CulpritPolicy, HangConfig, HangState, PatienceBook, step
from trainprobe.sidecar.core.hang.effects import (
    Effect,
    EvidenceRound,
    ExecuteAction,
    Inspect,
    KillDecided,
    MarkKill,
    Opened,
    Publish,
    Record,
    ResumeJob,
    SetVerdict,
    StacksRead,
    Sweep,
    Watch,
)
from trainprobe.sidecar.core.hang.records import (
    ActDecision,
    IncidentUpdate,
    PauseDecision,
    StallEnded,
)
from trainprobe.sidecar.core.hang.state import ROUND_S, plan_round
from trainprobe.sidecar.core.hang.state import note as note_for_coordinator
from trainprobe.sidecar.core.incident import ActionPolicy
from trainprobe.sidecar.core.job import EpisodeNote, JobView, SyncReply
from trainprobe.sidecar.core.judge import RuleConfig, evaluate, summarize
from trainprobe.sidecar.core.judge.evidence import RankEvidence
from trainprobe.sidecar.core.judge.summary import previous_attempt, session_times
from trainprobe.sidecar.core.session import GroupSeqData, Registry, StallPolicy, SyncData, Verdict
from trainprobe.sidecar.core.session.model import WorkerKey, WorkerState

T0 = 100.0
RULES = RuleConfig(stall=StallPolicy(timeout_s=3.0), heartbeat_timeout_s=1e6)


def machine(
    policy: ActionPolicy | None = None, patience_s: float | None = 0.0, grace_s: float = 10.0
) -> HangState:
    config = HangConfig(RULES, policy or ActionPolicy(), CulpritPolicy("kill_stalled", grace_s))
    return HangState.new(config, PatienceBook(setting_s=patience_s))


def stalled(world: int = 1) -> tuple[Registry, list[WorkerState]]:
    """Ranks that last stepped at T0+1 and still report at T0+4.5: stalled 3.5 s."""
    reg = Registry()
    ws = [connected(reg, r, T0, world=world) for r in range(world)]
    for w in ws:
        reg.apply(w, report(T0 + 4.5, step=5, step_t_s=T0 + 1), T0 + 4.5)
    return reg, ws


def tick(state: HangState, reg: Registry, now: float) -> list[Effect]:
    workers = reg.workers()
    _, effects = step(state, workers, evaluate(workers, RULES, now), (), now, 1.7e9 + now)
    return effects


def kinds(effects: Sequence[Effect]) -> list[str]:
    return [type(e).__name__ for e in effects]


def first_round(
    state: HangState, reg: Registry, watch: Watch, *evidence: RankEvidence
) -> EvidenceRound:
    plan = plan_round(state, watch.episode, reg.workers(), watch.round)
    assert plan is not None
    found = {ev.rank: ev for ev in evidence}
    return EvidenceRound(watch.episode, watch.incident, watch.round, plan.states, found)


def opened_watch(state: HangState, reg: Registry) -> Watch:
    (watch,) = [e for e in tick(state, reg, T0 + 4.5) if isinstance(e, Watch)]
    return watch


#: Rank 0 stopped by a signal, rank 1 asleep waiting for it.
STOPPED = (RankEvidence(0, state="stopped", samples=2), RankEvidence(1, state="sleeping"))


def test_a_stall_opens_an_episode_and_asks_for_evidence_before_anything_else() -> None:
    state = machine()
    reg, (w,) = stalled()
    effects = tick(state, reg, T0 + 4.5)
    assert kinds(effects) == ["SetVerdict", "Watch", "Opened"]
    verdict, watch, opened = effects
    assert verdict == SetVerdict(w.key, Verdict.HUNG, "stall")
    assert isinstance(watch, Watch) and isinstance(opened, Opened)
    assert watch.round == 0 and watch.delay_s == 0.0 and watch.signals is True
    assert watch.incident is opened.incident and opened.incident.rule == "stall"
    assert state.episodes.get("job") is watch.episode
    # Nothing was applied: the session's verdict is the registry's to set.
    assert w.verdict is Verdict.OK
    # The finding keeps firing: no second incident, no second watch.
    assert kinds(tick(state, reg, T0 + 4.6)) == ["SetVerdict"]


def test_definitive_evidence_publishes_decides_and_acts_in_order() -> None:
    state = machine()
    reg, (w, _) = stalled(world=2)
    watch = opened_watch(state, reg)
    rnd = first_round(state, reg, watch, *STOPPED)
    _, effects = step(state, reg.workers(), None, (rnd,), T0 + 5.0)
    assert kinds(effects) == [
        "Publish",
        "MarkKill",
        "Record",
        "Log",
        "KillDecided",
        "ExecuteAction",
    ]
    publish, mark, record, _, decided, execute = effects
    assert isinstance(publish, Publish) and isinstance(record, Record)
    # Published as it was at its first round: before the decision that followed.
    assert publish.incident is not watch.incident and publish.incident.decision is not None
    assert mark == MarkKill("job", 0, "stopped", watch.incident.id, False)
    assert isinstance(record.record, ActDecision) and record.record.to_record()["act"] is True
    assert decided == KillDecided("job", (0,))
    assert isinstance(execute, ExecuteAction) and execute.incident.targets == [0]
    assert execute.incident.action == "kill" and watch.episode.acted
    # Acted: no further round.
    assert plan_round(state, watch.episode, reg.workers(), 1) is None
    assert w.killed_rule == ""  # the registry's writer sets it, not the machine


def test_an_update_folded_in_before_the_incident_is_published_is_written_after_it() -> None:
    # Rank 1 of the stalled job exits before the first evidence round: its DEAD
    # incident is an update of the episode, and the log reads it after the
    # incident it updates (a reader drops an update of an incident not yet read).
    state = machine(policy=ActionPolicy(on_hung="observe"), patience_s=None)
    reg, (_, w1) = stalled(world=2)
    watch = opened_watch(state, reg)
    assert reg.close(w1, w1.generation, "vanished", T0 + 4.6, pid_alive=False)
    folded = tick(state, reg, T0 + 4.7)
    assert not any(isinstance(e, (Record, Publish)) for e in folded), kinds(folded)
    rnd = first_round(state, reg, watch, RankEvidence(0, state="sleeping", samples=2))
    _, effects = step(state, reg.workers(), None, (rnd,), T0 + 5.0)
    written = [e for e in effects if isinstance(e, (Record, Publish))]
    assert isinstance(written[0], Publish) and written[0].incident.id == watch.incident.id
    update = next(e.record for e in written if isinstance(e, Record))
    assert isinstance(update, IncidentUpdate) and update.episode_id == watch.incident.id
    assert update.to_record()["time"] == update.incident.time
    # Once published, a later update is written at once.
    assert reg.close(reg.workers()[0], reg.workers()[0].generation, "vanished", T0 + 6, False)
    later = [e for e in tick(state, reg, T0 + 6.1) if isinstance(e, Record)]
    assert [type(e.record) for e in later] == [IncidentUpdate], later


def test_ambiguous_evidence_publishes_the_verdict_and_watches_on() -> None:
    state = machine(patience_s=None)  # auto: 90 s at least
    reg, _ = stalled()
    watch = tick(state, reg, T0 + 4.5)[1]
    assert isinstance(watch, Watch)
    rnd = first_round(state, reg, watch, RankEvidence(0, state="sleeping", samples=2))  # alone
    _, effects = step(state, reg.workers(), None, (rnd,), T0 + 5.0)
    assert kinds(effects) == ["Log", "Publish", "Watch"]
    nxt = effects[-1]
    assert isinstance(nxt, Watch) and nxt.round == 1 and nxt.delay_s == ROUND_S
    assert not any(isinstance(e, (ExecuteAction, KillDecided, MarkKill)) for e in effects)
    published = effects[1]
    assert isinstance(published, Publish) and published.incident.decision is not None
    assert published.incident.decision["act"] is False


def test_the_round_after_is_due_when_the_patience_is_spent_not_a_round_later() -> None:
    # Stepped last at T0+1, patience 5 s: spent at T0+6. A round judged at
    # T0+5.7 comes back at T0+6.0, not at T0+6.7 (a kill up to a round late).
    state = machine(patience_s=5.0)
    reg, _ = stalled()
    watch = opened_watch(state, reg)
    sleeping = RankEvidence(0, state="sleeping", samples=2)
    _, effects = step(
        state, reg.workers(), None, (first_round(state, reg, watch, sleeping),), T0 + 5.7
    )
    nxt = effects[-1]
    assert isinstance(nxt, Watch) and round(nxt.delay_s, 6) == 0.3
    rnd = EvidenceRound(
        nxt.episode, nxt.incident, nxt.round, first_round(state, reg, nxt).states, {0: sleeping}
    )
    _, acted = step(state, reg.workers(), None, (rnd,), T0 + 6.0)
    assert any(isinstance(e, ExecuteAction) for e in acted)


def test_a_dry_run_decides_nothing_that_kills() -> None:
    state = machine(ActionPolicy(dry_run=True))
    reg, _ = stalled(world=2)
    watch = opened_watch(state, reg)
    assert watch.signals is False
    rnd = first_round(state, reg, watch, *STOPPED)
    _, effects = step(state, reg.workers(), None, (rnd,), T0 + 5.0)
    assert not any(isinstance(e, (KillDecided, MarkKill)) for e in effects)
    (execute,) = [e for e in effects if isinstance(e, ExecuteAction)]
    assert execute.incident.dry_run is True


def test_a_stall_that_ends_by_itself_closes_and_is_remembered() -> None:
    state = machine(patience_s=None)
    reg, (w,) = stalled()
    watch = tick(state, reg, T0 + 4.5)[1]
    assert isinstance(watch, Watch)
    reg.apply(w, report(T0 + 6.0, step=6, step_t_s=T0 + 6.0, seq=2), T0 + 6.0)
    effects = tick(state, reg, T0 + 6.0)
    assert kinds(effects) == ["SetVerdict", "Record", "Log", "Log"]
    assert effects[0] == SetVerdict(w.key, Verdict.OK, "")
    record = effects[1]
    assert isinstance(record, Record) and isinstance(record.record, StallEnded)
    assert record.record.to_record()["rule"] == "resumed"
    assert state.episodes.get("job") is None
    assert [round(s.length_s, 1) for s in state.patience.stalls("job")] == [5.0]
    # A round still in flight when it closed publishes the verdict once, and stops.
    rnd = first_round_after_close(watch)
    _, late = step(state, reg.workers(), None, (rnd,), T0 + 6.1)
    assert kinds(late) == ["Publish"]


def first_round_after_close(watch: Watch) -> EvidenceRound:
    return EvidenceRound(watch.episode, watch.incident, 0, (), {})


def test_the_rest_of_the_job_is_swept_after_the_grace() -> None:
    state = machine(grace_s=10.0)
    reg, _ = stalled(world=2)
    watch = opened_watch(state, reg)
    plan = plan_round(state, watch.episode, reg.workers(), 0)
    assert plan is not None and [w.hello.rank for w in plan.states] == [0, 1]
    rnd = first_round(state, reg, watch, *STOPPED)
    _, acted = step(state, reg.workers(), None, (rnd,), T0 + 5.0)
    (execute,) = [e for e in acted if isinstance(e, ExecuteAction)]
    killed = set(execute.incident.targets)
    assert killed and killed < {0, 1}
    assert not [e for e in tick(state, reg, T0 + 14.9) if isinstance(e, Sweep)]
    sweeps = [e for e in tick(state, reg, T0 + 15.1) if isinstance(e, Sweep)]
    assert [(s.phase, set(s.ranks) | killed) for s in sweeps] == [("job_kill_grace", {0, 1})]
    assert sweeps[0].episode_id == watch.episode.id


def test_a_session_that_steps_again_is_cleared_by_key() -> None:
    """Verdicts are set and cleared by key: the registry applies them to the session it holds."""
    state = machine()
    reg, (w,) = stalled()
    tick(state, reg, T0 + 4.5)
    assert state.flagged == {WorkerKey("job", 0): None}
    reg.apply(w, report(T0 + 5.0, step=9, step_t_s=T0 + 5.0, seq=2), T0 + 5.0)
    effects = tick(state, reg, T0 + 5.0)
    assert effects[0] == SetVerdict(WorkerKey("job", 0), Verdict.OK, "") and not state.flagged


def test_a_job_whose_every_rank_is_held_is_paused_not_killed() -> None:
    state = machine()
    reg, _ = stalled()
    watch = opened_watch(state, reg)
    rnd = first_round(state, reg, watch, RankEvidence(0, state="stopped", samples=2))
    _, effects = step(state, reg.workers(), None, (rnd,), T0 + 5.0)
    assert kinds(effects) == ["Log", "Record", "Publish", "Watch"]
    record = effects[1]
    assert isinstance(record, Record) and isinstance(record.record, PauseDecision)
    published = effects[2]
    assert isinstance(published, Publish) and published.incident.action == "observe"
    # It runs again: the job's clocks restart at the resume, and the watch ends.
    rnd = first_round(state, reg, watch, RankEvidence(0, state="sleeping", samples=3))
    _, effects = step(state, reg.workers(), None, (rnd,), T0 + 9.0)
    assert kinds(effects) == ["ResumeJob", "Log"]
    assert effects[0] == ResumeJob("job", T0 + 9.0)


def test_another_sidecars_episode_is_followed_stacks_first() -> None:
    """Rank 1 is served here, rank 0 by the sidecar that opened the episode: rank 0
    waits in allreduce #8, which rank 1 never entered (no rule fires here yet)."""
    config = HangConfig(RULES, ActionPolicy(), CulpritPolicy(), "here", reads_stacks=True)
    view = JobView()
    state = HangState.new(config, PatienceBook(setting_s=0.0), view)
    reg = Registry()
    mine = connected(reg, 1, T0, world=2)
    reg.apply(mine, report(T0 + 4.5, step=7, step_t_s=T0 + 2, sync=seq(7, 7)), T0 + 4.5)
    theirs = Registry()
    peer = connected(theirs, 0, T0, world=2)
    waiting = seq(8, 7, inflight_since_s=T0 + 2)
    theirs.apply(peer, report(T0 + 4.5, step=7, step_t_s=T0 + 2, sync=waiting), T0 + 4.5)
    note = EpisodeNote("ep-1", "job", "there", "HUNG", "stall", culprits=(1,))
    view.update("job", SyncReply(((summarize(peer, T0 + 4.5, 10.0), 0.0),), note), T0 + 4.5)
    effects = tick(state, reg, T0 + 4.5)
    (inspect,) = [e for e in effects if isinstance(e, Inspect)]
    assert [w.hello.rank for w in inspect.workers] == [1] and inspect.signals
    assert inspect.incident.rule == "remote_episode" and inspect.incident.targets == [1]
    assert kinds(effects) == ["Log", "KillDecided", "Inspect", "Opened"]
    assert KillDecided("job", (1,)) in effects
    assert not any(isinstance(e, (Publish, ExecuteAction)) for e in effects)
    assert inspect.episode.remote_id == "ep-1" and not state.episodes.should_follow("ep-1", "job")
    # The stacks are in: where the culprit is stuck, then publish and act.
    read = StacksRead(inspect.incident, inspect.episode, ((1, {"where": "train.py:9"}),), 0.2)
    _, effects = step(state, reg.workers(), None, (read,), T0 + 4.8)
    assert kinds(effects) == ["Publish", "ExecuteAction"]
    published = effects[0]
    assert isinstance(published, Publish) and published.incident.diagnosis is not None
    assert published.incident.diagnosis["stacks_s"] == 0.2
    told = note_for_coordinator(state, "job")
    assert told is not None and told.id == "ep-1" and told.where == {1: "train.py:9"}


def test_a_replicated_stall_that_ends_by_itself_records_the_replicated_patience() -> None:
    from tests.unit.test_replicas import rank
    from trainprobe.sidecar.core.hang.patience import REPLICA_FLOOR_S
    from trainprobe.sidecar.core.job.view import analyze_job

    state = machine(patience_s=None)
    reg, (w,) = stalled()
    watch = tick(state, reg, T0 + 4.5)[1]
    assert isinstance(watch, Watch)
    # The episode's diagnosis names a replica that stopped while the other waits.
    watch.episode.diagnosis = analyze_job([rank(0, "train_0", "quorum"), rank(1, "train_1")])
    reg.apply(w, report(T0 + 6.0, step=6, step_t_s=T0 + 6.0, seq=2), T0 + 6.0)
    (record,) = [e for e in tick(state, reg, T0 + 6.0) if isinstance(e, Record)]
    assert isinstance(record.record, StallEnded)
    # The patience that governs this job from now on is the replicated one, not 90 s.
    assert record.record.patience_s == REPLICA_FLOOR_S


def first_allreduce(since: float) -> SyncData:
    """A report's sync part: waiting in allreduce #1 of group 0 since ``since``."""
    return SyncData(groups=(GroupSeqData("0", 1, 0, int(since * 1e9), "allreduce", 1),))


#: Rank 0 waits in a collective; rank 1 sleeps in its own code.
STRAGGLING = (
    RankEvidence(0, state="sleeping", activity="collective", samples=2),
    RankEvidence(1, state="sleeping", activity="sleep", where="train.py:12", samples=2),
)


def decision(effects: Sequence[Effect]) -> dict[str, object] | None:
    acts = [e.record for e in effects if isinstance(e, Record)]
    return next((r.to_record() for r in acts if isinstance(r, ActDecision)), None)


def test_a_start_up_straggler_is_named_in_seconds_and_killed_after_the_start_up_patience() -> None:
    # Past the process group (Ray Train's restarted group): rank 0 waits in its
    # first allreduce from T0+2, rank 1 (connected at T0) never enters it.
    state = machine(patience_s=0.0)  # an ambiguous stall dies at its verdict...
    reg = Registry()
    w0, w1 = (connected(reg, r, T0, world=2) for r in (0, 1))
    reg.apply(w0, report(T0 + 8, sync=first_allreduce(T0 + 2)), T0 + 8)
    reg.apply(w1, report(T0 + 8), T0 + 8)
    (watch,) = [e for e in tick(state, reg, T0 + 8) if isinstance(e, Watch)]
    assert (watch.incident.rule, watch.incident.ranks) == ("startup_straggler", [1])
    assert watch.incident.onset_at == T0 + 2  # rank 0 began waiting for it
    _, effects = step(
        state, reg.workers(), None, (first_round(state, reg, watch, *STRAGGLING),), T0 + 9
    )
    (published,) = [e.incident for e in effects if isinstance(e, Publish)]
    assert published.diagnosis is not None and published.decision is not None
    assert published.diagnosis["culprits"] == [1] and published.diagnosis["waiting"] == [0]
    assert published.diagnosis["where"] == {"1": "train.py:12"}
    # ...but a start-up straggler's waits the start-up patience from that wait.
    assert published.decision["act"] is False and published.decision["patience_s"] == 600
    assert "startup_timeout_s" in str(published.decision["patience_basis"])
    assert not any(isinstance(e, (ExecuteAction, KillDecided, MarkKill)) for e in effects)
    for n, now in enumerate((T0 + 601, T0 + 603), start=2):
        reg.apply(w0, report(now, seq=n, sync=first_allreduce(T0 + 2)), now)
        reg.apply(w1, report(now, seq=n), now)
        (nxt,) = [e for e in effects if isinstance(e, Watch)]
        rnd = first_round(state, reg, nxt, *STRAGGLING)
        _, effects = step(state, reg.workers(), None, (rnd,), now)
        if now < T0 + 602:
            assert not any(isinstance(e, ExecuteAction) for e in effects)
    (execute,) = [e for e in effects if isinstance(e, ExecuteAction)]
    assert execute.incident.targets == [1] and decision(effects)["rule"] == "patience"  # type: ignore[index]


def test_a_start_up_stragglers_patience_counts_from_its_peers_wait_not_its_connect() -> None:
    # A start-up hook connects at the process group; the set-up takes 700 s
    # (weights from a slow disk) and rank 1 reaches DDP's construction 8 s after
    # rank 0. Named in seconds, but killed only once rank 0 waited the start-up
    # patience for it: counted from the connect, it was spent before the wait began.
    state = machine(patience_s=0.0)
    reg = Registry()
    w0, w1 = (
        reg.open(dataclasses.replace(hello(rank=r, world=2), startup_watch=True), T0)
        for r in (0, 1)
    )
    wait = T0 + 700
    reg.apply(w0, report(wait + 6, sync=first_allreduce(wait)), wait + 6)
    reg.apply(w1, report(wait + 6), wait + 6)
    (watch,) = [e for e in tick(state, reg, wait + 6) if isinstance(e, Watch)]
    assert (watch.incident.rule, watch.incident.ranks) == ("startup_straggler", [1])
    assert watch.incident.onset_at == wait  # rank 0 began waiting for it
    effects: Sequence[Effect] = [watch]
    for n, now in enumerate((wait + 7, wait + 599, wait + 601), start=2):
        reg.apply(w0, report(now, seq=n, sync=first_allreduce(wait)), now)
        reg.apply(w1, report(now, seq=n), now)
        (nxt,) = [e for e in effects if isinstance(e, Watch)]
        _, effects = step(
            state, reg.workers(), None, (first_round(state, reg, nxt, *STRAGGLING),), now
        )
        if now < wait + 600:
            assert not any(isinstance(e, (ExecuteAction, KillDecided, MarkKill)) for e in effects)
    (execute,) = [e for e in effects if isinstance(e, ExecuteAction)]
    assert execute.incident.targets == [1]


def test_a_start_up_wait_that_ends_by_itself_leaves_the_patience_as_it_was() -> None:
    # Rank 1 downloads for 100 s while rank 0 waits at a barrier: named, then both step.
    state = machine(patience_s=None)
    reg = Registry()
    w0, w1 = (connected(reg, r, T0, world=2) for r in (0, 1))
    reg.apply(w0, report(T0 + 8, sync=first_allreduce(T0 + 2)), T0 + 8)
    reg.apply(w1, report(T0 + 8), T0 + 8)
    assert [e for e in tick(state, reg, T0 + 8) if isinstance(e, Watch)]
    for w in (w0, w1):
        reg.apply(w, report(T0 + 100, step=1, step_t_s=T0 + 100, seq=2), T0 + 100)
    tick(state, reg, T0 + 100)
    assert state.episodes.get("job") is None
    assert state.patience.stalls("job") == [] and state.patience.patience_s("job")[0] == 90


def test_a_gone_process_of_the_previous_attempt_is_no_definitive_evidence() -> None:
    # Attempt 1: both ranks step; we kill rank 1 and the orchestrator ends rank 0.
    state = machine(patience_s=None)
    reg = Registry()
    old = [connected(reg, r, T0, world=2) for r in (0, 1)]
    for w in old:
        reg.apply(w, report(T0 + 20, step=13, step_t_s=T0 + 19), T0 + 20)
        assert reg.close(w, w.generation, "vanished", T0 + 25, pid_alive=False)
    old[1].killed_by_us = True
    # Attempt 2: rank 0's new process waits in its first allreduce; rank 1's new
    # process hangs before its hook (a checkpoint read) and never connects.
    w0 = connected(reg, 0, T0 + 40, world=2, pid=2000)
    now = T0 + 40 + 601
    reg.apply(w0, report(now, sync=first_allreduce(T0 + 41)), now)
    (watch,) = [e for e in tick(state, reg, now) if isinstance(e, Watch)]
    assert (watch.incident.rule, watch.incident.ranks) == ("startup", [0])
    # Rank 1's session left from attempt 1 is sampled: /proc says its pid is gone.
    gone = RankEvidence(1, state="gone", samples=2, reporter_alive=False)
    rnd = first_round(state, reg, watch, STRAGGLING[0], gone)
    assert [w.hello.pid for w in rnd.states] == [1001, 2000]
    _, effects = step(state, reg.workers(), None, (rnd,), now + 0.5)
    j = decision(effects)
    assert j is not None and j["rule"] == "patience" and j["definitive"] is False, j
    # Named as the rank of this attempt that never reported, not by its old pid.
    (published,) = [e.incident for e in effects if isinstance(e, Publish)]
    assert published.diagnosis is not None and published.diagnosis["culprits"] == [1]
    assert "rank 1 never reported" in str(published.diagnosis["summary"])
    assert "1001" not in str(published.diagnosis["summary"])
    assert "served by another sidecar" not in published.action_reason
    # Rank 0 is ended after job_kill_grace_s (the orchestrator restarts the group),
    # not at once as a definitive culprit's peers are (peers_of_gone).
    assert not any(isinstance(e, Sweep) for e in tick(state, reg, now + 1))
    sweeps = [e for e in tick(state, reg, now + 11) if isinstance(e, Sweep)]
    assert [(s.phase, s.ranks) for s in sweeps] == [("job_kill_grace", (0,))]


def test_only_a_session_last_heard_before_every_live_peer_began_is_of_a_previous_attempt() -> None:
    # (rank, first seen, last heard, live)
    assert previous_attempt([(0, 140.0, 700.0, True), (1, 100.0, 125.0, False)]) == {1}
    # Rank 1 died while rank 0's process ran: the same attempt, its death stays definitive.
    assert previous_attempt([(0, 100.0, 700.0, True), (1, 100.0, 125.0, False)]) == set()
    assert previous_attempt([(0, 140.0, 700.0, True), (1, 130.0, 145.0, False)]) == set()
    # A live session, however silent, is the rules' to judge (heartbeat, stopped).
    assert previous_attempt([(0, 140.0, 700.0, True), (1, 100.0, 125.0, True)]) == set()
    # No live peer to compare with: nothing is superseded.
    assert previous_attempt([(0, 100.0, 120.0, False), (1, 100.0, 125.0, False)]) == set()


def test_a_rank_killed_before_its_first_report_is_of_the_attempt_its_stream_overlapped() -> None:
    # Rank 1 connects 1 ms before rank 0 and is SIGKILLed before its first report
    # (every second): its stream ended while rank 0 ran, so it is of the same
    # attempt, and its death is definitive. Judged by its Hello alone, it was
    # "a process of an earlier attempt", and the kill waited 90 s.
    reg = Registry()
    w1 = connected(reg, 1, T0, world=2)
    w0 = connected(reg, 0, T0 + 0.001, world=2)
    assert reg.close(w1, w1.generation, "vanished", T0 + 1.0, pid_alive=False)
    reg.apply(w0, report(T0 + 2.0, step=40, step_t_s=T0 + 1.0), T0 + 2.0)
    assert previous_attempt(session_times(reg.workers())) == set()
    # A torchrun restart: the old attempt's stream ended before the new one connected.
    reg = Registry()
    old = connected(reg, 1, T0, world=2)
    assert reg.close(old, old.generation, "vanished", T0 + 1.0, pid_alive=False)
    connected(reg, 0, T0 + 5.0, world=2, pid=2000)
    assert previous_attempt(session_times(reg.workers())) == {1}


def test_an_episode_decided_here_leaves_its_note_closed_once_it_is_over() -> None:
    config = HangConfig(RULES, ActionPolicy(), CulpritPolicy("kill_stalled", 10.0), "node-b")
    state = HangState.new(config, PatienceBook(setting_s=0.0))
    reg, (w, peer) = stalled(world=2)
    watch = opened_watch(state, reg)
    step(state, reg.workers(), None, (first_round(state, reg, watch, *STOPPED),), T0 + 5.0)
    # Only a sidecar that syncs the job keeps it (a job view; decided alone here).
    state.job_view = JobView()
    open_note = note_for_coordinator(state, "job")
    assert open_note is not None and open_note.culprits == (0,) and not open_note.closed
    w.killed_by_us = peer.killed_by_us = True  # the kill and the sweep, as applied
    tick(state, reg, T0 + 5.1)
    assert state.episodes.get("job") is None and note_for_coordinator(state, "job") is None
    assert state.closed == {"job": replace(open_note, closed=True)}
    # A stall that ended by itself (nothing decided) leaves none.
    state = HangState.new(config, PatienceBook(), JobView())
    reg, (w,) = stalled()
    opened_watch(state, reg)
    reg.apply(w, report(T0 + 6.0, step=6, step_t_s=T0 + 6.0, seq=2), T0 + 6.0)
    tick(state, reg, T0 + 6.0)
    assert state.episodes.get("job") is None and state.closed == {}
