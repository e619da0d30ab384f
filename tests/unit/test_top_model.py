"""trainprobe top's model: cells, colours, culprits and the feed, from status replies."""

from __future__ import annotations

from rich.console import Console

from trainprobe.proto import probe_pb2
from trainprobe.sidecar.cli.top.view import LAG_BAD_S, TopModel, colour, render


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


def _frame(m: TopModel, width: int, height: int) -> list[str]:
    console = Console(width=width, height=height, record=True, color_system=None)
    console.print(render(m, width=width, height=height))
    return console.export_text().splitlines()


def test_an_80_by_24_frame_shows_every_rank_whole_and_the_culprit_first() -> None:
    m = TopModel()
    rows = [(r, 5, 0.0, 1, 0, "HUNG" if r == 37 else "OK") for r in range(64)]
    culprit = {"j": {"kind": "straggler", "culprits": [37], "summary": "rank 37 " + "x" * 200}}
    for t in range(50):
        m.update(reply(*rows), culprit, float(t))
    for _ in range(10):
        m.feed.append("12:00:00 j: straggler: a long line " + "y" * 200)
    lines = _frame(m, 80, 24)
    assert len(lines) <= 24 and max(len(x) for x in lines) <= 80, "\n".join(lines)
    shown = [x.split() for x in lines if x.split() and x.split()[0].isdigit()]
    assert any(s[0] == "37" and "CULPRIT" in s for s in shown)
    assert any("more ranks" in x for x in lines) and "incidents:" in "\n".join(lines)
    assert not any("…" in " ".join(s[:2]) for s in shown)  # rank and step never cut
    (header,) = [x for x in lines if "RANK" in x]
    assert header.split()[:5] == ["RANK", "STEP", "STEPS/S", "LAG", "VERDICT"], header
    assert any(s[3] == "0/0ms" for s in shown)
    # Few ranks: all shown, with as many recent windows as the width leaves.
    small = TopModel()
    for t in range(50):
        small.update(reply(*rows[:3]), HEALTHY, float(t))
    lines = _frame(small, 80, 24)
    assert [s.split()[0] for s in lines if s.split() and s.split()[0].isdigit()] == ["0", "1", "2"]
    assert max(len(x) for x in lines) <= 80
    assert max(x.count("█") + x.count("·") for x in lines) >= 30


def test_the_job_is_named_as_status_names_it() -> None:
    """A new user saw the job's UUID in top where status showed its name."""
    m = TopModel()
    named = reply((0, 5, 0.0, 1, 0, "OK"))
    named.workers[0].job_name = "bert-finetune"
    m.update(named, HEALTHY, 0.0)
    title = _frame(m, 100, 24)[0]
    assert "job bert-finetune (id j)" in title, title
    other = reply((0, 5, 0.0, 1, 0, "OK"))
    other.workers[0].job_id = "k"
    m.update(other, {"k": {"kind": "healthy", "culprits": []}}, 1.0)
    rows = [
        x.split()
        for x in _frame(m, 100, 24)
        if x.split() and x.split()[0] in {"bert-finetune", "k"}
    ]
    assert sorted(r[0] for r in rows) == ["bert-finetune", "k"]


def test_top_shows_the_decision_as_it_happens_and_after_it() -> None:
    """The countdown (status's words), WAITING for a waiter, then KILLED, never
    'OK (vanished)', and the feed says HUNG -> KILLED; at 80 x 24 the file:line shows."""
    m = TopModel()
    diag = {"j": {"kind": "straggler", "culprits": [1], "waiting": [0], "summary": "rank 1"}}
    m.update(reply((0, 5, 0, 1, 0, "OK"), (1, 5, 0, 1, 0, "OK")), HEALTHY, 1.0)
    watched = reply((0, 5, 0, 1, 0, "HUNG"), (1, 5, 0, 1, 0, "HUNG"))
    where = "rank 1 at ddp_worker.py:212 in hang (sleeping)"
    for w in watched.workers:
        w.suspect = f"HUNG? 12 s of 90 s patience — {where}"
    m.update(watched, diag, 2.0)
    lines = _frame(m, 80, 24)
    text = "\n".join(lines)
    assert "HUNG? 12 s of 90 s patience" in text and "ddp_worker.py:212" in text, text
    row0 = next(x for x in lines if x.split()[:2] == ["0", "5"])
    row1 = next(x for x in lines if x.split()[:2] == ["1", "5"])
    assert "WAITING" in row0 and "SUSPECT" not in row0 and "CULPRIT" in row1
    killed = reply((0, 5, 0, 1, 0, "HUNG"), (1, 5, 0, 1, 0, "OK"))
    killed.workers[1].state = "vanished"
    killed.workers[1].killed_rule, killed.workers[1].killed_incident = "patience", "i-1"
    m.update(killed, diag, 3.0)
    lines = _frame(m, 80, 24)
    text = "\n".join(lines)
    row1 = next(x for x in lines if x.split()[:2] == ["1", "5"])
    assert "KILLED" in row1 and "vanished" not in row1 and "OK" not in row1.split()
    assert any("rank 1: HUNG -> KILLED" in f for f in m.feed), list(m.feed)
    assert "KILLED rank 1 by patience (incident i-1)" in text, text
    assert max(len(x) for x in lines) <= 80


def test_a_countdown_that_ends_without_a_kill_reads_resumed() -> None:
    m = TopModel()
    watched = reply((0, 5, 0, 1, 0, "HUNG"))
    watched.workers[0].suspect = "HUNG? 3 s of 90 s patience — rank 0"
    m.update(watched, HEALTHY, 1.0)
    m.update(reply((0, 9, 0, 2, 0, "OK")), HEALTHY, 2.0)
    assert m.decisions["j"].startswith("RESUMED at ") and "nothing was killed" in m.decisions["j"]
    paused = reply((0, 9, 0, 2, 0, "HUNG"))
    paused.workers[0].suspect = "PAUSED 4 s — every live rank is held"
    m.update(paused, HEALTHY, 3.0)
    assert "PAUSED" in _frame(m, 80, 24)[0]
    m.update(reply((0, 12, 0, 3, 0, "OK")), HEALTHY, 4.0)
    assert any(f.endswith("PAUSED -> RESUMED") for f in m.feed), list(m.feed)


def test_a_rank_that_ended_has_no_step_time() -> None:
    """A finished job's 'step time' was the time since it ended (384-394 s)."""
    m = TopModel()
    m.update(reply((0, 5, 0, 1, 0, "OK")), HEALTHY, 1.0)
    m.update(reply((0, 7, 0, 1, 0, "OK")), HEALTHY, 2.0)
    ended = reply((0, 7, 0, 1, 0, "OK"))
    ended.workers[0].state, ended.workers[0].step_age_s = "goodbye", 384.0
    m.update(ended, HEALTHY, 3.0)
    m.update(ended, HEALTHY, 4.0)
    assert list(m.rows[("j", 0)].cells) == [(None, 0), (0.5, None), (None, None), (None, None)]


def test_jobs_named_by_default_stay_apart_when_their_names_are_cut() -> None:
    """The hook's default job name is the script and its start time: two runs of
    one script differ only at the end, so a cut label keeps the end."""
    m = TopModel()
    names = ["ddp_train.py 2026-12-06 16:05:06", "ddp_train.py 2026-12-06 16:05:36"]
    m.update(
        probe_pb2.StatusReply(
            workers=[
                probe_pb2.WorkerStatus(
                    job_id=f"id{i}", job_name=name, rank=0, has_step=True, step=5, verdict="OK"
                )
                for i, name in enumerate(names)
            ]
        ),
        {},
        1.0,
    )
    labels = [x.split()[0] for x in _frame(m, 80, 24) if "ddp" in x]
    assert len(labels) == 2 and labels[0] != labels[1], labels
