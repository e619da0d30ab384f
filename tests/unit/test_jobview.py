"""The job seen whole: aging shared summaries, merging, the coordinator's memory."""

from __future__ import annotations

from trainprobe.sidecar.core.job import (
    CoordinatorState,
    EpisodeNote,
    JobView,
    aged,
    analyze_job,
    merge_summaries,
)
from trainprobe.sidecar.core.judge import GroupProgress, RankSummary
from trainprobe.sidecar.core.judge.culprit import HEALTHY, STRAGGLER, UNRESPONSIVE


def rank(r: int, world: int = 4, inflight: float | None = None, seq: int = 42, **kw: object):  # type: ignore[no-untyped-def]
    g = GroupProgress(
        "default",
        issued=seq if inflight is not None else seq - 1,
        completed=seq - 1,
        inflight_age_s=inflight,
        inflight_op="allreduce" if inflight is not None else "",
        inflight_seq=seq if inflight is not None else 0,
    )
    fields: dict[str, object] = {"has_step": True, "step": 10, "step_age_s": 1.0, "groups": (g,)}
    fields.update(kw)
    return RankSummary(rank=r, world_size=world, host=f"h{r}", **fields)  # type: ignore[arg-type]


def test_a_summary_ages_on_the_receivers_clock_and_stops_counting_as_reporting() -> None:
    s = rank(2, inflight=1.0, report_age_s=0.5)
    later = aged(s, 2.0, heartbeat_limit_s=10.0)
    assert later.report_age_s == 2.5 and later.step_age_s == 3.0
    assert later.groups[0].inflight_age_s == 3.0 and later.reporting
    assert not aged(s, 9.6, heartbeat_limit_s=10.0).reporting  # unheard of for 10.1 s
    assert aged(s, 0.0, 10.0) is s
    # The kernel's word on a silent rank ages as its report does: its freshness
    # is judged on the receiver's clock too.
    held = rank(2, reporting=False, kernel="stopped", kernel_age_s=0.3)
    assert aged(held, 2.0, 10.0).kernel_age_s == 2.3
    assert aged(s, 2.0, 10.0).kernel == "" and aged(s, 2.0, 10.0).kernel_age_s == 0.0


def test_this_sidecars_own_rank_wins_over_hearsay() -> None:
    mine, theirs = rank(1, step=11), rank(1, step=9)
    merged = merge_summaries([mine, rank(0)], [theirs, rank(3)])
    assert [s.rank for s in merged] == [0, 1, 3] and merged[1].step == 11


def test_a_running_job_is_healthy_whatever_its_instantaneous_picture() -> None:
    # Mid-step, two ranks already wait in the allreduce while two still compute:
    # analyze() alone would call that a straggler; nobody is hung, so it is not.
    snapshot = [rank(0, inflight=0.01), rank(1, inflight=0.02), rank(2), rank(3)]
    d = analyze_job(snapshot)
    assert d.kind == HEALTHY and d.culprits == () and "steps 10..10" in d.summary
    hung = [rank(0, inflight=6.0, verdict="HUNG"), rank(1, inflight=6.0), rank(2), rank(3)]
    assert analyze_job(hung).kind == STRAGGLER and analyze_job(hung).culprits == (2, 3)
    missing = [rank(0), rank(1), rank(2)]
    assert analyze_job(missing).kind == UNRESPONSIVE  # rank 3 never reported


def note(by: str, id_: str = "a-1", **kw: object) -> EpisodeNote:
    return EpisodeNote(id=id_, job_id="j", opened_by=by, verdict="HUNG", rule="stall", **kw)  # type: ignore[arg-type]


def test_coordinator_shares_everyone_elses_ranks_with_their_age() -> None:
    c = CoordinatorState(stale_after_s=30)
    c.sync("A", [rank(0), rank(1)], None, now=10.0)
    reply = c.sync("B", [rank(2), rank(3)], None, now=10.5)
    assert sorted(s.rank for s, _ in reply.others) == [0, 1]
    assert {age for _, age in reply.others} == {0.5}
    reply = c.sync("A", [rank(0), rank(1)], None, now=11.0)
    assert sorted(s.rank for s, _ in reply.others) == [2, 3]
    # B goes quiet for longer than stale_after_s: forgotten.
    assert c.sync("A", [], None, now=41.0).others == ()


def test_one_episode_per_job_first_come_closed_by_its_opener() -> None:
    c = CoordinatorState()
    c.sync("B", [rank(2)], None, now=1.0)
    assert c.sync("A", [rank(0)], note("A"), now=2.0).episode == note("A")
    # B opened its own at the same time: A's stands, B hears of A's.
    assert c.sync("B", [rank(2)], note("B", "b-1"), now=2.1).episode == note("A")
    # B, following, adds where its culprit is stuck.
    followed = note("", where={2: "train.py:88 in load_batch"})
    assert c.sync("B", [rank(2)], followed, now=2.2).episode.where == {  # type: ignore[union-attr]
        2: "train.py:88 in load_batch"
    }
    # A's episode ended (A sends no note): it is gone for everyone.
    assert c.sync("A", [rank(0)], None, now=3.0).episode is None
    assert c.sync("B", [rank(2)], None, now=3.1).episode is None


def test_an_episode_of_a_sidecar_that_went_away_is_dropped() -> None:
    c = CoordinatorState(stale_after_s=5)
    c.sync("A", [rank(0)], note("A"), now=0.0)
    assert c.sync("B", [rank(2)], None, now=4.0).episode == note("A")
    assert c.sync("B", [rank(2)], None, now=6.0).episode is None


def test_the_view_ages_what_it_heard() -> None:
    c = CoordinatorState()
    c.sync("A", [rank(0, report_age_s=0.2)], note("A"), now=5.0)
    reply = c.sync("B", [rank(2)], None, now=5.5)
    view = JobView()
    assert view.remote("j", 100.0, 10.0) == [] and view.episode("j") is None
    view.update("j", reply, now=100.0)
    (r0,) = view.remote("j", now=101.0, heartbeat_limit_s=10.0)
    assert r0.rank == 0 and abs(r0.report_age_s - (0.2 + 0.5 + 1.0)) < 1e-9
    assert view.episode("j") == note("A")
    view.forget("j")
    assert view.remote("j", 101.0, 10.0) == []


def test_a_closed_note_is_kept_for_the_record_and_never_an_episode() -> None:
    from dataclasses import replace

    from trainprobe.sidecar.core.job import SyncReply

    c = CoordinatorState()
    c.sync("B", [rank(2)], None, now=1.0)
    # A's episode opened and closed between two syncs: told once, closed.
    closed = replace(note("A"), closed=True)
    assert c.sync("A", [rank(0)], closed, now=2.0).episode is None
    assert c.sync("B", [rank(2)], None, now=2.1).episode is None
    assert list(c.closed) == [closed]
    # B's open episode stands; A's closed note neither ends nor replaces it.
    assert c.sync("B", [rank(2)], note("B", "b-1"), now=3.0).episode == note("B", "b-1")
    assert c.sync("A", [rank(0)], replace(closed, id="a-2"), now=3.1).episode == note("B", "b-1")
    # B closes its own at once and tells it closed: it was held open, so it just ends.
    c.closed.clear()
    assert c.sync("B", [rank(2)], replace(note("B", "b-1"), closed=True), now=4.0).episode is None
    assert list(c.closed) == []
    # A closed note from a sidecar that did not open it is not kept.
    c.sync("B", [rank(2)], replace(note("A", "x"), closed=True), now=5.0)
    assert list(c.closed) == []
    # And one that reached a node anyway is nothing to follow.
    v = JobView()
    v.update("j", SyncReply(episode=closed), now=6.0)
    assert v.episode("j") is None
