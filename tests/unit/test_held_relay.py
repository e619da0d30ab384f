"""A relayed rank held by its node's kernel: the pure half, with a fake clock.

The node (:class:`HeldWatch`) reads a verified worker only once it is silent,
then at the evidence cadence while silent or held, and sends each held read
and one release; the upstream (:func:`relayed_samples`) turns the word of the
node stream that owns the session into the ``/proc`` sample of a local rank,
so :func:`paused_reason` and :func:`definitive_reason` judge both alike.
"""

from __future__ import annotations

import pytest

from tests.core_builders import connected, report
from trainprobe.sidecar.core.hang.held import (
    READ_EVERY_S,
    HeldWatch,
    awaiting_word,
    held_fresh_s,
    held_kind,
    relayed_samples,
)
from trainprobe.sidecar.core.hang.pause import paused_reason
from trainprobe.sidecar.core.hang.state import plan_round
from trainprobe.sidecar.core.judge.culprit import RankSummary
from trainprobe.sidecar.core.judge.evidence import (
    ProcSample,
    assess,
    definitive_reason,
    stale_after_s,
)
from trainprobe.sidecar.core.limits import MAX_HELD, MAX_HELD_AGE_MS
from trainprobe.sidecar.core.session import Registry
from trainprobe.sidecar.core.session.model import WorkerState
from trainprobe.sidecar.core.session.validate import ValidationError, validate_held

T0 = 100.0
NODE = object()  # the Relay stream that vouched for (owns) a session


# -- the node: when to read, what to send ------------------------------------------


def test_a_reporting_worker_is_never_read() -> None:
    watch = HeldWatch()
    watch.watch(1, 100, T0)
    for i in range(50):  # reports every 100 ms for 5 s
        watch.heard(1, T0 + i * 0.1)
        assert watch.due(T0 + i * 0.1 + 0.05) == []
    assert watch.updates(T0 + 5) == []


def test_a_silent_worker_is_read_once_a_cadence_and_each_held_read_is_sent() -> None:
    watch = HeldWatch()
    watch.watch(1, 100, T0)
    assert watch.due(T0 + 0.9) == []  # 1 s of silence at 100 ms reports is not yet stale
    assert watch.due(T0 + 1.1) == [1]
    watch.seen(1, "stopped", T0 + 1.1)
    assert watch.updates(T0 + 1.3) == [(1, "stopped", pytest.approx(0.2))]
    assert watch.updates(T0 + 1.4) == []  # sent once
    assert watch.due(T0 + 1.1 + READ_EVERY_S / 2) == []
    assert watch.due(T0 + 1.1 + READ_EVERY_S) == [1]
    watch.seen(1, "stopped", T0 + 2.1)  # still held: sent again, the word stays fresh
    assert watch.updates(T0 + 2.2) == [(1, "stopped", pytest.approx(0.1))]
    assert watch.held() == {1: "stopped"}


def test_a_silent_worker_that_runs_sends_nothing() -> None:
    # A GIL hog: silent, but the kernel shows it running. Read, not sent.
    watch = HeldWatch()
    watch.watch(1, 100, T0)
    watch.seen(1, "", T0 + 1.5)
    assert watch.updates(T0 + 1.6) == []
    assert watch.due(T0 + 1.5 + READ_EVERY_S) == [1]  # read again at the cadence, no sooner


def test_a_report_after_a_held_read_is_one_release() -> None:
    watch = HeldWatch()
    watch.watch(1, 100, T0)
    watch.seen(1, "frozen", T0 + 1.2)
    watch.updates(T0 + 1.3)
    watch.heard(1, T0 + 16.0)  # thawed: it reports
    assert watch.updates(T0 + 16.1) == [(1, "", pytest.approx(0.1))]
    assert watch.updates(T0 + 16.2) == []
    watch.heard(1, T0 + 16.2)
    assert watch.updates(T0 + 16.3) == [] and watch.held() == {}


def test_a_read_that_a_report_overtook_is_not_taken() -> None:
    watch = HeldWatch()
    watch.watch(1, 100, T0)
    watch.heard(1, T0 + 1.25)  # it resumed while the read (started at 1.2) ran
    watch.seen(1, "stopped", T0 + 1.2)
    assert watch.updates(T0 + 1.3) == [] and watch.held() == {}


def test_a_new_relay_stream_gets_every_held_word_again_and_no_release() -> None:
    watch = HeldWatch()
    for sid in (1, 2, 3):
        watch.watch(sid, 100, T0)
    watch.seen(1, "stopped", T0 + 1.2)
    watch.seen(2, "traced", T0 + 1.2)
    watch.seen(3, "", T0 + 1.2)
    watch.updates(T0 + 1.3)
    watch.forget(2)
    watch.resend()
    assert watch.updates(T0 + 1.5) == [(1, "stopped", pytest.approx(0.3))]
    watch.seen(2, "stopped", T0 + 2.0)  # a read of a stream that ended meanwhile
    assert watch.updates(T0 + 2.1) == []


# -- the upstream: the owning stream's word as evidence ------------------------------


def relayed(
    reg: Registry, rank: int, how: str | None, at: float, node: object = NODE
) -> WorkerState:
    w = connected(reg, rank, T0, world=2, interval_ms=100)
    w.node = node  # vouched by that Relay stream (Registry.open does this)
    Registry.set_relay_interval(w, 500)
    Registry.set_held(w, None if how is None else (how, at))
    return w


def summary(rank: int, reporting: bool) -> RankSummary:
    return RankSummary(rank=rank, world_size=2, reporting=reporting)


def test_two_relayed_ranks_held_is_a_pause() -> None:
    reg, now = Registry(), T0 + 5
    ws = [relayed(reg, 0, "stopped", now - 0.6), relayed(reg, 1, "stopped", now - 0.2)]
    evidence = {w.hello.rank: assess(w.hello.rank, relayed_samples(w, now), [], False) for w in ws}
    assert all(ev.state == "stopped" and ev.held for ev in evidence.values())
    why = paused_reason(evidence, [summary(0, False), summary(1, False)])
    assert "stopped by SIGSTOP" in why and "ranks [0, 1]" in why


def test_a_relayed_stopped_rank_whose_peer_waits_is_definitive() -> None:
    reg, now = Registry(), T0 + 5
    ws = [relayed(reg, 0, None, 0.0), relayed(reg, 1, "stopped", now - 0.5)]
    evidence = {w.hello.rank: assess(w.hello.rank, relayed_samples(w, now), [], True) for w in ws}
    assert evidence[0].state == ""  # no word: unknown, as a relayed rank was before
    assert paused_reason(evidence, [summary(0, True), summary(1, False)]) == ""
    assert definitive_reason(evidence[1]) == "stopped"


def test_a_local_and_a_relayed_rank_held_together_are_a_pause() -> None:
    reg, now = Registry(), T0 + 5
    local = assess(0, [ProcSample(now - 0.3, "T"), ProcSample(now, "T")], [], False)
    w = relayed(reg, 1, "frozen", now - 0.5)
    evidence = {0: local, 1: assess(1, relayed_samples(w, now), [], False)}
    assert held_kind(evidence[1]) == "frozen" and definitive_reason(evidence[1]) == ""
    why = paused_reason(evidence, [summary(0, False), summary(1, False)])
    assert "frozen by a cgroup freezer" in why and "stopped by SIGSTOP" in why


def test_a_word_is_taken_only_while_fresh_live_and_vouched() -> None:
    reg = Registry()
    w = relayed(reg, 0, "traced", T0)
    fresh = held_fresh_s(w.relay_interval_ms)
    assert fresh == 3 * READ_EVERY_S
    assert relayed_samples(w, T0 + fresh)[0].state == "t"
    assert relayed_samples(w, T0 + fresh + 0.01) == []  # the node went quiet: unknown again
    assert relayed_samples(relayed(reg, 1, "stopped", T0, node=None), T0) == []  # unvouched
    w.connected = False
    assert relayed_samples(w, T0) == []
    # A slow node's word lasts 3 of its batches.
    assert held_fresh_s(4000) == pytest.approx(12.0)


def test_held_entries_are_bounded() -> None:
    validate_held([(0, 0), (3, MAX_HELD_AGE_MS)], 4)
    with pytest.raises(ValidationError, match=r"held\[0\]\.how=4"):
        validate_held([(4, 0)], 4)
    with pytest.raises(ValidationError, match=r"held\[1\]\.age_ms"):
        validate_held([(1, 0), (1, MAX_HELD_AGE_MS + 1)], 4)
    with pytest.raises(ValidationError, match="entries"):
        validate_held([(1, 0)] * (MAX_HELD + 1), 4)


# -- the upstream takes a word only from the stream that owns the rank ----------------


def test_only_the_owning_relay_stream_sets_a_ranks_word() -> None:
    from trainprobe.proto import probe_pb2
    from trainprobe.sidecar.relay.held import take_held

    reg, other = Registry(), object()
    owned = relayed(reg, 0, None, 0.0)
    unvouched = relayed(reg, 1, None, 0.0, node=None)
    sessions = {7: (owned, owned.generation), 8: (unvouched, unvouched.generation)}
    stopped = probe_pb2.HELD_STOPPED
    words = [probe_pb2.HeldWorker(stream_id=s, how=stopped, age_ms=250) for s in (7, 8, 9)]
    assert take_held(other, sessions, words, T0) is None  # a stream that owns neither
    assert owned.held is None and unvouched.held is None
    assert take_held(NODE, sessions, words, T0) is None
    assert owned.held == ("stopped", pytest.approx(T0 - 0.25))
    assert unvouched.held is None  # no node vouched for it: no kernel's word about it
    release = [probe_pb2.HeldWorker(stream_id=7, how=probe_pb2.HELD_NONE)]
    assert take_held(NODE, sessions, release, T0 + 1) is None and owned.held is None
    bad = [probe_pb2.HeldWorker(stream_id=7, how=9)]
    code, details = take_held(NODE, sessions, bad, T0 + 2)  # type: ignore[misc]
    assert code.name == "INVALID_ARGUMENT" and "held[0].how=9" in details


# -- a kill on patience alone waits for a node's word that is on its way -------------


def test_a_patience_kill_waits_for_a_relay_nodes_word_then_goes_on() -> None:
    from tests.unit.test_hang_machine import machine, tick
    from trainprobe.sidecar.core.hang import step
    from trainprobe.sidecar.core.hang.effects import EvidenceRound, ExecuteAction, Watch
    from trainprobe.sidecar.core.hang.state import plan_round
    from trainprobe.sidecar.core.judge.evidence import RankEvidence

    def run(held: tuple[str, float] | None, now: float) -> list[object]:
        state = machine()  # patience 0: anything but a pause or a wait kills at once
        reg = Registry()
        ws = [connected(reg, r, T0, world=2, interval_ms=100) for r in range(2)]
        for w in ws:
            w.node = NODE
            Registry.set_relay_interval(w, 500)
        # Both last stepped at T0+1; rank 0 still reports (waiting), rank 1 went silent at T0+4.
        reg.apply(ws[1], report(T0 + 4.0, step=5, step_t_s=T0 + 1), T0 + 4.0)
        reg.apply(ws[0], report(T0 + 4.5, step=5, step_t_s=T0 + 1), T0 + 4.5)
        # A relayed rank's stall counts from when its next batch was due: open at T0+5.
        (watch,) = [e for e in tick(state, reg, T0 + 5.0) if isinstance(e, Watch)]
        ws[0].last_report_at = now - 0.3  # rank 0 goes on reporting
        Registry.set_held(ws[1], held)
        plan = plan_round(state, watch.episode, reg.workers(), watch.round)
        assert plan is not None
        evidence = {
            w.hello.rank: assess(w.hello.rank, relayed_samples(w, now), [], True) for w in ws
        }
        evidence[0] = RankEvidence(0, reporter_alive=True)
        rnd = EvidenceRound(watch.episode, watch.incident, watch.round, plan.states, evidence)
        _, effects = step(state, reg.workers(), None, (rnd,), now)
        return [e for e in effects if isinstance(e, ExecuteAction)]

    # 1.5 s after rank 1's last report: its node may not have read it yet.
    assert awaiting_word(list(_relayed_pair()), T0 + 5.5) == [1]
    assert run(None, T0 + 5.5) == []
    # The word came: stopped, so killed at once, definitively.
    (kill,) = run(("stopped", T0 + 5.2), T0 + 5.5)
    assert kill.incident.targets == [1]  # type: ignore[attr-defined]
    # No word 2.5 s after (1 s silent + 2 batches + 2 read waits): the node saw it run.
    (kill,) = run(None, T0 + 6.6)
    assert kill.incident.targets  # type: ignore[attr-defined]


def _relayed_pair() -> list[WorkerState]:
    reg = Registry()
    ws = [relayed(reg, r, None, 0.0) for r in range(2)]
    ws[0].last_report_at, ws[1].last_report_at = T0 + 5.3, T0 + 4.0
    return ws


# -- a held rank on one node never masks a silent hang on another --------------------

ROGUE = object()  # a token holder's own Relay stream: it vouches for its made-up rank


def _job_of_three(rank2: str | None, words: dict[int, str] | None = None) -> list[object]:
    """Ranks 0 and 1 relayed by node A, silent since T0+4 (a C call holding the
    GIL: node A sees them run and says nothing); rank 2, if any, relayed by
    ``ROGUE`` and held as ``rank2`` says. ``words``: node A's word on its ranks.
    The effects of one evidence round at each of T0+5.5 (node A's word may
    still be on its way) and T0+6.6 (it had its time), patience 0."""
    from tests.unit.test_hang_machine import machine, tick
    from trainprobe.sidecar.core.hang import step
    from trainprobe.sidecar.core.hang.effects import EvidenceRound, Watch
    from trainprobe.sidecar.core.session.model import heard_every_ms

    out: list[object] = []
    for now in (T0 + 5.5, T0 + 6.6):
        state, reg = machine(), Registry()
        ranks = (0, 1, 2) if rank2 else (0, 1)
        ws = [connected(reg, r, T0, world=3, interval_ms=100) for r in ranks]
        for w in ws:
            w.node = ROGUE if w.hello.rank == 2 else NODE
            Registry.set_relay_interval(w, 500)
            reg.apply(w, report(T0 + 4.0, step=5, step_t_s=T0 + 1), T0 + 4.0)
        (watch,) = [e for e in tick(state, reg, T0 + 5.0) if isinstance(e, Watch)]
        for w in ws:
            how = rank2 if w.hello.rank == 2 else (words or {}).get(w.hello.rank)
            Registry.set_held(w, (how, now - 0.3) if how else None)
        plan = plan_round(state, watch.episode, reg.workers(), watch.round)
        assert plan is not None
        evidence = {
            w.hello.rank: assess(
                w.hello.rank,
                relayed_samples(w, now),
                [],
                now - w.last_report_at <= stale_after_s(heard_every_ms(w)),
            )
            for w in plan.states
        }
        rnd = EvidenceRound(watch.episode, watch.incident, watch.round, plan.states, evidence)
        effects = step(state, reg.workers(), None, (rnd,), now)[1]
        out.append([*effects, *tick(state, reg, now)])  # and a sweep due at once
    return out


def _kills(effects: object) -> dict[int, str]:
    """rank -> why, for each rank an action or a sweep orders killed."""
    from trainprobe.sidecar.core.hang.effects import ExecuteAction, Sweep

    out: dict[int, str] = {}
    for e in effects:  # type: ignore[attr-defined]
        if isinstance(e, ExecuteAction):
            out.update((r, e.incident.decision["rule"]) for r in e.incident.targets)  # type: ignore[index]
        elif isinstance(e, Sweep):
            out.update((r, e.phase) for r in e.ranks if r not in out)
    return out


def _paused(effects: object) -> list[str]:
    from trainprobe.sidecar.core.hang.effects import Record
    from trainprobe.sidecar.core.hang.records import PauseDecision

    return [
        e.record.why  # type: ignore[attr-defined]
        for e in effects  # type: ignore[attr-defined]
        if isinstance(e, Record) and isinstance(e.record, PauseDecision)
    ]


@pytest.mark.parametrize("rank2", [None, "stopped", "traced", "frozen"])
def test_a_silent_hang_is_killed_with_a_held_rank_elsewhere_as_without(rank2: str | None) -> None:
    early, late = _job_of_three(rank2)
    # Node A's word may still be on its way: no pause, no kill (a definitive one either).
    assert _paused(early) == [] and _kills(early) == {}
    # Node A had its time and said nothing: ranks 0 and 1 run, so the job is not
    # paused, and they are killed when their patience is spent, as without rank 2.
    assert _paused(late) == []
    kills = _kills(late)
    if rank2 == "stopped":
        # The stopped rank at once, as ever; the ranks stuck on their own beside
        # it are swept when their patience is spent (not job_kill_grace_s later).
        assert kills == {2: "stopped", 0: "stuck_beside_stopped", 1: "stuck_beside_stopped"}
    else:
        assert kills[0] == kills[1] == "patience", kills


def test_a_job_stopped_on_two_nodes_waits_for_the_second_nodes_word_then_is_paused() -> None:
    # Rank 2's node spoke first; node A's word on ranks 0 and 1 comes by T0+6.6.
    early, _ = _job_of_three("stopped")
    _, late = _job_of_three("stopped", {0: "stopped", 1: "stopped"})
    assert _kills(early) == {} and _paused(early) == []
    assert _kills(late) == {} and "ranks [0, 1, 2]" in _paused(late)[0]


def _ten_ranks(held: int) -> list[object]:
    """Ranks 0-9 relayed, silent since T0+4; the first ``held`` under a debugger
    (their node's word), the rest hung silently (their node saw them run). The
    effects of a round at T0+6.6, patience 0; the round samples ranks 0-7."""
    from tests.unit.test_hang_machine import machine, tick
    from trainprobe.sidecar.core.hang import step
    from trainprobe.sidecar.core.hang.effects import EvidenceRound, Watch

    now = T0 + 6.6
    state, reg = machine(), Registry()
    ws = [connected(reg, r, T0, world=10, interval_ms=100) for r in range(10)]
    for w in ws:
        w.node = NODE
        Registry.set_relay_interval(w, 500)
        reg.apply(w, report(T0 + 4.0, step=5, step_t_s=T0 + 1), T0 + 4.0)
    (watch,) = [e for e in tick(state, reg, T0 + 5.0) if isinstance(e, Watch)]
    for w in ws[:held]:
        Registry.set_held(w, ("traced", now - 0.3))
    plan = plan_round(state, watch.episode, reg.workers(), watch.round)
    assert plan is not None and {w.hello.rank for w in plan.states} == set(range(8))
    evidence = {
        w.hello.rank: assess(w.hello.rank, relayed_samples(w, now), [], False) for w in plan.states
    }
    rnd = EvidenceRound(watch.episode, watch.incident, watch.round, plan.states, evidence)
    return [*step(state, reg.workers(), None, (rnd,), now)[1], *tick(state, reg, now)]


def test_a_silent_rank_past_the_sampled_eight_is_not_masked_either() -> None:
    """An episode samples at most 8 ranks (MAX_INSPECTED), culprits first; a
    relayed rank's word costs nothing to read, so every relayed rank counts:
    8 ranks held do not make the silent hang of ranks 8 and 9 a pause."""
    held = _ten_ranks(8)
    assert _paused(held) == []
    assert _kills(held) == _kills(_ten_ranks(0)) != {}  # as without the held ranks
    assert "ranks [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in _paused(_ten_ranks(10))[0]
