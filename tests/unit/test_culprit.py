"""Culprit analysis from hand-made job states."""

from __future__ import annotations

from trainprobe.sidecar.core.judge.culprit import (
    ALL_IN_FLIGHT,
    HEALTHY,
    INCONCLUSIVE,
    MISMATCH,
    STRAGGLER,
    UNRESPONSIVE,
    GroupProgress,
    RankSummary,
    analyze,
)


def waiting(
    rank: int, seq: int = 42, op: str = "allreduce", world: int = 4, age: float = 6.0, **kw: object
) -> RankSummary:
    g = GroupProgress(
        "default",
        issued=seq,
        completed=seq - 1,
        inflight_age_s=age,
        inflight_op=op,
        inflight_seq=seq,
    )
    return _rank(rank, world, g, **kw)


def idle(rank: int, issued: int = 41, world: int = 4, **kw: object) -> RankSummary:
    return _rank(rank, world, GroupProgress("default", issued=issued, completed=issued), **kw)


def _rank(rank: int, world: int, g: GroupProgress, **kw: object) -> RankSummary:
    """Rank ``rank`` of ``world``, two a node, at step 10 for 6.5 s, in group ``g``."""
    return RankSummary(
        rank=rank,
        world_size=world,
        host=f"node{rank // 2}",
        pid=100 + rank,
        has_step=True,
        step=10,
        step_age_s=6.5,
        groups=(g,),
        **kw,
    )  # type: ignore[arg-type]


def test_rank_outside_the_collective_is_the_straggler() -> None:
    d = analyze([waiting(0), waiting(1), idle(2), waiting(3)])
    assert d.kind == STRAGGLER and d.culprits == (2,) and d.waiting == (0, 1, 3)
    assert d.confidence >= 0.9 and d.conclusive
    assert "rank 2 on node1 never entered allreduce #42" in d.summary
    assert "not in any collective" in d.summary
    assert d.to_record()["evidence"]["seq"] == 42


def test_a_rank_at_a_lower_sequence_in_an_older_wait_is_behind_too() -> None:
    older = GroupProgress(
        "default",
        issued=40,
        completed=39,
        inflight_age_s=1.0,
        inflight_op="allreduce",
        inflight_seq=40,
    )
    other = GroupProgress("side", issued=3, completed=3)
    lagging = RankSummary(rank=1, world_size=3, has_step=True, step=9, groups=(other, older))
    d = analyze([waiting(0, world=3), lagging, waiting(2, world=3)])
    assert d.culprits == (1,)


def test_different_op_at_the_same_sequence_is_a_mismatch() -> None:
    d = analyze([waiting(0), waiting(1, op="broadcast"), waiting(2), waiting(3)])
    assert d.kind == MISMATCH and d.culprits == (1,) and d.conclusive
    assert "rank 1: broadcast #42" in d.summary


def test_an_even_split_names_no_culprit() -> None:
    d = analyze([waiting(0), waiting(1), waiting(2, seq=43), waiting(3, seq=43)])
    assert d.kind == MISMATCH and d.culprits == () and not d.conclusive
    assert d.confidence < 0.5 and d.evidence["same_seq"] is False


def test_two_ranks_with_different_ops_at_one_sequence_are_a_tie_at_the_same_seq() -> None:
    d = analyze([waiting(0, world=2), waiting(1, world=2, op="all_gather")])
    assert d.kind == MISMATCH and d.culprits == () and d.evidence["same_seq"] is True
    assert "rank 1: all_gather #42" in d.summary


def test_everyone_in_the_same_collective_points_at_the_network() -> None:
    d = analyze([waiting(r) for r in range(4)])
    assert d.kind == ALL_IN_FLIGHT and d.culprits == () and d.waiting == (0, 1, 2, 3)
    assert "network" in d.summary


def test_silent_rank_is_unresponsive_and_waiting_ranks_are_not_blamed() -> None:
    stopped = idle(3, reporting=False, report_age_s=12.0)
    d = analyze([waiting(0), waiting(1), waiting(2), stopped])
    assert d.kind == UNRESPONSIVE and d.culprits == (3,) and d.waiting == (0, 1, 2)
    assert d.confidence >= 0.9 and "sent no report for 12.0s" in d.summary


def test_a_rank_that_never_reported_is_named() -> None:
    d = analyze([waiting(0), waiting(1), waiting(2)])
    assert d.kind == UNRESPONSIVE and d.culprits == (3,)
    assert "rank 3 never reported" in d.summary and d.evidence["missing"] == [3]


def test_vanished_rank() -> None:
    gone = idle(1, world=2, reporting=False, ended="vanished")
    d = analyze([waiting(0, world=2), gone])
    assert d.culprits == (1,) and "is gone" in d.summary


def test_all_silent_is_low_confidence() -> None:
    d = analyze([idle(r, world=2, reporting=False) for r in range(2)])
    assert d.kind == UNRESPONSIVE and d.confidence < 0.5


def test_rank_without_collective_data_is_behind_the_frontier() -> None:
    bare = RankSummary(rank=2, world_size=3, has_step=True, step=10)
    d = analyze([waiting(0, world=3), waiting(1, world=3), bare])
    assert d.kind == STRAGGLER and d.culprits == (2,)
    assert "never used 'default'" in d.summary


def test_a_rank_inside_a_declared_phase_is_not_a_culprit() -> None:
    ckpt = idle(0, phases=("checkpoint",))
    d = analyze([ckpt, waiting(1), waiting(2), waiting(3)])
    assert 0 not in d.culprits and not d.conclusive


def test_without_collectives_steps_decide_or_nothing_does() -> None:
    def stepped(rank: int, step: int) -> RankSummary:
        return RankSummary(rank=rank, world_size=3, has_step=True, step=step)

    d = analyze([stepped(0, 50), stepped(1, 49), stepped(2, 50)])
    assert d.kind == STRAGGLER and d.culprits == (1,) and d.confidence < 0.9
    d = analyze([stepped(r, 50) for r in range(3)])
    assert d.kind == INCONCLUSIVE and d.culprits == ()
    assert analyze([RankSummary(rank=0, world_size=1)]).kind == INCONCLUSIVE


def test_a_job_of_one_rank_is_not_told_to_compare_its_ranks() -> None:
    """The README's plain loop on one process: its stop is named as that rank's,
    not as "no rank stands out (use hook.watch_ddp ...)", which only makes
    sense with peers; still inconclusive, so the action is unchanged."""
    d = analyze([RankSummary(rank=0, world_size=1, has_step=True, step=40)])
    assert d.kind == INCONCLUSIVE and d.culprits == ()
    assert d.summary == (
        "rank 0, the job's only rank, stopped after step 40 with no collective in flight"
    )


def test_finished_ranks_are_ignored() -> None:
    assert analyze([idle(0, world=1, ended="goodbye")]).kind == HEALTHY
    d = analyze([waiting(0, world=2), idle(1, world=2, ended="goodbye", reporting=False)])
    assert d.kind == ALL_IN_FLIGHT  # the finished rank is not "silent"


def test_waiting_ranks_are_never_blamed() -> None:
    """Whatever the mix, a rank in flight at the majority's collective is not a culprit."""
    import itertools

    kinds = [
        lambda r: waiting(r),
        lambda r: idle(r),
        lambda r: waiting(r, op="barrier"),
        lambda r: idle(r, reporting=False),
        lambda r: waiting(r, seq=41),
    ]
    for combo in itertools.product(range(len(kinds)), repeat=4):
        ranks = [kinds[k](r) for r, k in enumerate(combo)]
        d = analyze(ranks)
        majority = d.evidence.get("majority") or (
            {"seq": d.evidence.get("seq"), "op": d.evidence.get("op")}
            if "seq" in d.evidence
            else None
        )
        if majority is None:
            continue
        for r in ranks:
            g = r.group("default")
            if (
                r.reporting
                and g
                and g.inflight_age_s is not None
                and (g.inflight_seq, g.inflight_op) == (majority["seq"], majority["op"])
            ):
                assert r.rank not in d.culprits, (combo, d)


def test_the_text_says_where_the_culprit_is_stuck() -> None:
    d = analyze([waiting(0), waiting(1), idle(2, node="f3a9c2d1e4b5"), waiting(3)])
    assert "rank 2 on node1 (Ray node f3a9c2d1) never entered allreduce #42" in d.summary
    assert d.text == d.summary and d.where == {}
    placed = d.with_where({2: "train.py:88 in load_batch"})
    assert placed.text == f"{d.summary}; rank 2 is stuck at train.py:88 in load_batch"
    record = placed.to_record()
    assert record["where"] == {"2": "train.py:88 in load_batch"}
    assert record["text"] == placed.text and record["conclusive"] is True
    assert d.where == {}  # with_where returns a new diagnosis


def test_a_diagnosis_over_thousands_of_ranks_stays_a_paragraph() -> None:
    """A partition silences every rank of a 3,000-rank job: each one's sentence
    made a 220 KB text in the incident record, its log line and its span. The
    text names the first few and counts the rest; the fields keep them all."""
    world = 3000
    d = analyze([idle(r, world=world, reporting=False, report_age_s=11.0) for r in range(world)])
    assert d.kind == UNRESPONSIVE and d.culprits == tuple(range(world))
    assert len(d.text) < 1000, len(d.text)
    assert d.text.startswith("rank 0 on node0 (pid 100) sent no report for 11.0s; ")
    assert d.text.endswith("; and 2,992 more ranks likewise")


def test_the_ranks_waiting_on_a_straggler_are_counted_past_a_few() -> None:
    world = 2000
    d = analyze(
        [idle(0, issued=41, world=world)] + [waiting(r, world=world) for r in range(1, world)]
    )
    assert d.kind == STRAGGLER and d.culprits == (0,) and len(d.waiting) == world - 1
    assert len(d.text) < 1000, len(d.text)


def test_unverified_sequence_numbers_never_outvote_the_verified_ranks() -> None:
    # Verified ranks 0 and 1 wait in allreduce #42, verified rank 2 never entered it
    # (the real culprit); three unverified sessions claim to wait at #900.
    real = [waiting(0, world=6, verified=True), waiting(1, world=6, verified=True)]
    real.append(idle(2, world=6, verified=True))
    liars = [waiting(r, seq=900, world=6) for r in (3, 4, 5)]
    d = analyze(real + liars)
    assert d.kind == STRAGGLER and d.culprits == (2,), d.summary  # was: ranks 0 and 1
    # A made-up operation at the verified ranks' own sequence is no tie: no mismatch
    # (which would end every rank in it at once), the wait is judged as such.
    tie = analyze([waiting(0, world=2, verified=True), waiting(1, world=2, op="broadcast")])
    assert tie.kind == ALL_IN_FLIGHT and not tie.culprits, tie.summary

    # Nor does a made-up step far ahead put the verified ranks behind.
    def stepped(rank: int, step: int, verified: bool) -> RankSummary:
        return RankSummary(rank=rank, world_size=3, has_step=True, step=step, verified=verified)

    ahead = analyze([stepped(0, 50, True), stepped(1, 49, True), stepped(2, 10**9, False)])
    assert ahead.culprits == (1,), ahead.summary


def test_a_world_size_no_hello_could_claim_is_read_as_the_largest_one_can() -> None:
    """Another sidecar's summaries (the Ray job sync: the coordinator is an actor any
    process of the cluster can call) carry a world size no Hello was checked for.
    The missing ranks are counted up to it, on the sidecar's loop: a made-up
    2**62 never ended. At most MAX_WORLD_SIZE, the bound every Hello meets."""
    from trainprobe.sidecar.core.limits import MAX_WORLD_SIZE

    silent = RankSummary(rank=0, world_size=2, reporting=False, report_age_s=9.0)
    diag = analyze([silent, RankSummary(rank=1, world_size=4 * MAX_WORLD_SIZE)])
    assert len(diag.culprits) == MAX_WORLD_SIZE - 1, len(diag.culprits)
