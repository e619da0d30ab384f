"""trainprobe top's model: cells, colours, culprits and the feed, from status replies."""

from __future__ import annotations

from rich.console import Console

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.cli.top import LAG_BAD_S, TopModel, colour, render


def reply(*rows: tuple[int, int, float, int, int, str]) -> probe_pb2.StatusReply:
    """(rank, step, lag last_s, lag count, missed, verdict) per rank."""
    return probe_pb2.StatusReply(
        workers=[
            probe_pb2.WorkerStatus(
                job_id="j",
                rank=rank,
                has_step=True,
                step=step,
                verdict=verdict,
                state="connected",
                arrival_lag=probe_pb2.ArrivalLag(count=count, last_s=last, missed=missed),
            )
            for rank, step, last, count, missed, verdict in rows
        ]
    )


HEALTHY = {"j": {"kind": "healthy", "culprits": []}}


def lags(model: TopModel, rank: int) -> list[float | None]:
    return [lag for _, lag in model.rows[("j", rank)].cells]


def test_a_rank_that_missed_a_collective_stays_late_until_it_arrives_again() -> None:
    m = TopModel()
    m.update(reply((0, 10, 0.0, 5, 0, "OK"), (1, 10, 0.01, 5, 0, "OK")), HEALTHY, 1.0)
    m.update(reply((0, 12, 0.0, 6, 0, "OK"), (1, 12, 3.0, 6, 1, "OK")), HEALTHY, 2.0)
    m.update(reply((0, 12, 0.0, 6, 0, "OK"), (1, 12, 3.0, 6, 1, "OK")), HEALTHY, 3.0)
    assert lags(m, 1) == [0.01, 3.0, 3.0]  # still missing: still red
    assert lags(m, 0) == [0.0, 0.0, None]  # nothing new compared: blank
    m.update(reply((0, 13, 0.0, 7, 0, "OK"), (1, 13, 0.02, 7, 1, "OK")), HEALTHY, 4.0)
    m.update(reply((0, 13, 0.0, 7, 0, "OK"), (1, 13, 0.02, 7, 1, "OK")), HEALTHY, 5.0)
    assert lags(m, 1)[-2:] == [0.02, None]
    assert colour(3.0, "lag", None) == 2 and colour(0.01, "lag", None) == 0
    assert colour(LAG_BAD_S / 2, "lag", None) == 1


def test_step_colour_is_relative_to_the_jobs_median_rank() -> None:
    assert colour(0.1, "step", 0.1) == 0
    assert colour(0.2, "step", 0.1) == 1
    assert colour(0.5, "step", 0.1) == 2
    assert colour(None, "step", 0.1) == -1


def test_culprits_are_marked_and_a_finding_enters_the_feed_once() -> None:
    m = TopModel()
    hung = {
        "j": {"kind": "straggler", "culprits": [1], "summary": "rank 1 never entered #5 (1.0s)"}
    }
    m.update(reply((0, 5, 0, 1, 0, "OK"), (1, 5, 0, 1, 0, "OK")), HEALTHY, 1.0)
    m.update(reply((0, 5, 0, 1, 0, "HUNG"), (1, 5, 0, 1, 0, "OK")), hung, 2.0)
    hung["j"]["summary"] = "rank 1 never entered #5 (2.0s)"  # the text ages; the finding does not
    m.update(reply((0, 5, 0, 1, 0, "HUNG"), (1, 5, 0, 1, 0, "OK")), hung, 3.0)
    feed = list(m.feed)
    assert len(feed) == 2, feed
    assert "rank 0: OK -> HUNG" in feed[0] and "straggler" in feed[1]
    console = Console(width=160, record=True, color_system=None)
    console.print(render(m))
    lines = console.export_text().splitlines()
    (row1,) = [line for line in lines if line.split()[:2] == ["1", "5"]]
    (row0,) = [line for line in lines if line.split()[:2] == ["0", "5"]]
    assert "CULPRIT" in row1 and "SUSPECT" in row0
