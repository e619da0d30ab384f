"""A node may claim its ranks are of a world of MAX_WORLD_SIZE: the upstream's
analysis of that job must cost what it holds, not what is claimed."""

from __future__ import annotations

from tests.unit.test_job_push import stopped, waiting, watched_job
from trainprobe.sidecar.core.job.uplink import Upload
from trainprobe.sidecar.core.job.verdict import MAX_NAMED, judge_job
from trainprobe.sidecar.core.limits import MAX_WORLD_SIZE


def test_a_claimed_world_of_missing_ranks_is_counted_not_listed() -> None:
    held = [waiting(r, MAX_WORLD_SIZE) for r in range(100, 165)] + [stopped(200, MAX_WORLD_SIZE)]
    a = judge_job(held, 1, 0.0)
    d = a.diagnosis
    # Before: a million missing ranks listed in the culprits, the evidence and
    # their set (~80 MB kept, an analysis a second at a watched job).
    assert len(d.culprits) <= MAX_NAMED + len(held) and len(a.culprit_set) <= len(d.culprits)
    missing = MAX_WORLD_SIZE - len(held)
    assert d.evidence["missing_count"] == missing
    # What every node is told is as exact as before: the first ranks named, every one counted.
    v = a.verdict_for(())
    assert v.culprits == tuple(range(MAX_NAMED)) and v.culprit_count == missing + 1
    assert v.diagnosis(gated=False).evidence["culprit_count"] == missing + 1
    assert v.evidence["missing"] == list(range(MAX_NAMED))
    assert v.evidence["missing_count"] == missing
    assert f"and {missing + 1 - 8:,} more ranks likewise" in d.summary
    # The stopped rank its node holds is named to that node.
    assert 200 in a.pushed([200]).culprits


def test_a_node_asking_with_a_short_refresh_does_not_age_the_other_nodes_ranks() -> None:
    """Each node's ranks age by its own refresh (how often it sends a report
    again), not by the last asker's: a node that asks with refresh_s=0.1 must
    not make every other node's ranks look silent."""
    hub = watched_job()  # 12 nodes, refresh 3 s: a rank not sent again is reporting for 19 s
    hub.join("evil")
    replies, _ = hub.apply("evil", [Upload("j", detail=True, bounded=True)], 0.1, 10.9)
    v = replies[0][1].verdict
    assert v is not None and v.kind != "unresponsive", v
    pushes = hub.tick(12.0)
    assert all(r.verdict is not None and r.verdict.kind != "unresponsive" for _, _, r in pushes)


def test_a_node_cannot_hold_more_ranks_by_dropping_one_rank_many_times() -> None:
    import pytest

    from trainprobe.sidecar.core.job.hub import Refused, SummaryHub
    from trainprobe.sidecar.core.judge.diagnosis import RankSummary
    from trainprobe.sidecar.core.limits import MAX_SYNC_RANKS_PER_NODE as MAX

    hub = SummaryHub("t")
    hub.join("evil")
    hub.apply("evil", [Upload("j", (RankSummary(0, 8192),), full=True)], 3.0, 0.0)
    half = MAX // 2  # what the wire lets one upload carry: ranks + dropped <= MAX
    with pytest.raises(Refused, match="ranks"):
        for k in range(4):  # each time a rank it holds, dropped `half` times
            new = tuple(RankSummary(r, 8192) for r in range(1 + k * half, 1 + (k + 1) * half))
            hub.apply("evil", [Upload("j", new, dropped=(k * half,) * half)], 3.0, 0.1 + k / 100)
    assert hub.ranks() <= MAX
    # Dropping a rank it sends again in the same upload frees no room either.
    mine = tuple(RankSummary(r, 8192) for r in range(MAX))
    hub.apply("evil", [Upload("j", mine, full=True)], 3.0, 0.2)
    more = tuple(RankSummary(r, 8192) for r in range(MAX, 2 * MAX))
    with pytest.raises(Refused, match="ranks"):
        hub.apply("evil", [Upload("j", mine + more, dropped=tuple(range(MAX)))], 3.0, 0.3)
    assert hub.ranks() == MAX
    # What an honest node does still fits: drop some, take as many others.
    swap = Upload("j", more[:10], dropped=tuple(range(10)))
    hub.apply("evil", [swap], 3.0, 0.4)
    assert hub.ranks() == MAX
