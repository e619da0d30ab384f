"""A starved sidecar stays honest (core/session/pace.py), with a fake clock.

The sidecar's own lateness (tick lag, the floor of its reports' ingest lags)
holds back every verdict that is an age, so a backlog of its own ages no
stepping worker; a real hang inside the backlog is still judged, that much
later, with its latency counted from the onset the reports show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core_builders import connected, report
from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.core.incident.incidents import group_incidents
from trainprobe.sidecar.core.incident.policy import ActionPolicy
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.session import Registry
from trainprobe.sidecar.core.session.model import Finding, Verdict, WorkerKey
from trainprobe.sidecar.core.session.pace import BEHIND_S, MAX_ALLOWANCE_S, Pace, defer
from trainprobe.sidecar.engine.loop import Engine

T0 = 100.0
RANKS = 20
LAG = 12.5  # the backlog measured on a starved 2-core machine: 11.7 s


class NoActions:
    async def execute(self, incident: object) -> None:
        raise AssertionError("no incident expected")

    async def sweep(self, *args: object, **kw: object) -> None:
        raise AssertionError("no sweep expected")


def test_the_floor_is_the_sidecars_backlog_not_one_late_worker() -> None:
    pace = Pace()
    t = T0
    for _ in range(20):  # 2 s: nine workers on time, one 40 s "late" (or lying)
        t += 0.1
        for rank in range(10):
            pace.note_report(t, 40.0 if rank == 0 else 0.02)
    assert pace.own_lag(t) <= 0.05 and not pace.view(t).behind
    for _ in range(20):  # every report 12 s late: the sidecar is behind
        t += 0.1
        for _rank in range(10):
            pace.note_report(t, 12.0)
    view = pace.view(t)
    assert view.behind and 12.0 <= view.own_lag_s <= 1.1 * 12.0  # never understated
    for _ in range(100):  # on time again: behind until the window has passed
        t += 0.1
        for _rank in range(10):
            pace.note_report(t, 0.02)
        if t < T0 + 4 + 9:
            assert pace.view(t).behind
    assert not pace.view(t + 0.5).behind and pace.own_lag(t + 0.5) <= 0.05


def test_tick_lag_counts_and_the_allowance_is_bounded() -> None:
    pace = Pace()
    pace.note_tick(T0, 0.9, 0.1)
    assert pace.own_lag(T0 + 1) == pytest.approx(0.8)
    assert pace.view(T0 + 1).behind
    assert not Pace().view(T0).behind
    pace.note_report(T0 + 2, 500.0)
    assert pace.allowance(T0 + 2) == MAX_ALLOWANCE_S


def backlogged(reg: Registry, engine: Engine, until: float, hung: int = -1, hung_at: float = 0):
    """Every rank steps every 0.1 s until ``until`` (worker time); the sidecar reads
    each report LAG s late (as the servicer does: applied for liveness only, its
    lag noted). Rank ``hung`` stops stepping at ``hung_at``. Yields the read times."""
    t = T0 + 3.0
    while t < until - 1e-9:
        t += 0.1
        step = round((t - T0) * 10)
        for w in reg:
            if w.hello.rank == hung and t >= hung_at:
                rep = report(t, step=round((hung_at - T0) * 10), step_t_s=hung_at, seq=step)
            else:
                rep = report(t, step=step, seq=step)
            reg.apply(w, rep, t + LAG, sampled=False)
            engine.pace.note_report(t + LAG, w.ingest_lag_s)
        yield t + LAG


def test_a_sidecar_far_behind_its_reports_judges_no_stepping_worker(tmp_path: Path) -> None:
    now = [T0]
    reg = Registry()
    cfg = RuleConfig()  # shipped: heartbeat 10 s, stall threshold 3 s at this pace
    workers = [connected(reg, r, T0, interval_ms=100, world=RANKS) for r in range(RANKS)]
    for i in range(1, 31):  # on time, past the stall warm-up
        for w in workers:
            reg.apply(w, report(T0 + i * 0.1, step=i, seq=i, durations=(0.1,)), T0 + i * 0.1)
    engine = Engine(reg, cfg, ActionPolicy(), IncidentLog(tmp_path / "i.jsonl"), NoActions())
    engine._clock = lambda: now[0]
    for now[0] in backlogged(reg, engine, T0 + 30):
        assert engine.tick() == []
    # Why the rule alone fails: the shift for the backlog is bounded per worker
    # (by the 10 s heartbeat limit, so no client clock hides a hang), so a 12.5 s
    # backlog makes every stepping rank look stalled for 2.5 s and more.
    later = now[0] + 0.6  # a reading hiccup: no report read for 0.6 s
    assert {f.rule for f in evaluate(reg, cfg, later)} == {"stall"}
    now[0] = later
    assert engine.tick() == []
    view = engine.pace.view(later)
    assert view.behind and view.own_lag_s >= LAG
    assert view.deferred_now == RANKS and view.deferred == RANKS


def test_a_hang_inside_the_backlog_is_still_judged_from_its_onset(tmp_path: Path) -> None:
    reg = Registry()
    cfg = RuleConfig()
    workers = [connected(reg, r, T0, interval_ms=100) for r in range(4)]
    for i in range(1, 31):
        for w in workers:
            reg.apply(w, report(T0 + i * 0.1, step=i, seq=i, durations=(0.1,)), T0 + i * 0.1)
    engine = Engine(reg, cfg, ActionPolicy(), IncidentLog(tmp_path / "i.jsonl"), NoActions())
    hung_at = T0 + 20.0
    found: list[Finding] = []
    for now in backlogged(reg, engine, T0 + 60, hung=2, hung_at=hung_at):
        found = evaluate(reg, cfg, now, engine.pace.allowance(now))
        if found:
            break
    assert [(f.key.rank, f.rule) for f in found] == [(2, "stall")]
    # The stall threshold (3 s) past the onset, read LAG s late, judged as of the
    # sidecar's own lateness (its floor, LAG and at most a bucket's 10 % more)
    # earlier: no sooner than the worker's own clock allows, and no later than
    # the bucket's width beyond it.
    assert hung_at + 3.0 + LAG <= now <= hung_at + 3.0 + 1.1 * LAG + 0.2
    (incident,) = group_incidents(found, {w.key: w for w in reg}, now, 0.0)
    assert incident.onset_at == pytest.approx(hung_at, abs=0.15)
    assert incident.detection_latency_s == pytest.approx(now - hung_at, abs=0.15)


def test_silence_is_deferred_by_the_sidecars_lateness_only() -> None:
    reg = Registry()
    cfg = RuleConfig()
    w = connected(reg, 0, T0, interval_ms=100)
    reg.apply(w, report(T0 + 0.1, step=1, seq=1), T0 + 0.1)
    assert {f.rule for f in evaluate(reg, cfg, T0 + 10.2)} == {"heartbeat"}
    assert evaluate(reg, cfg, T0 + 10.2, allowance_s=5.0) == []
    (late,) = evaluate(reg, cfg, T0 + 15.2, allowance_s=5.0)
    assert late.rule == "heartbeat" and late.evidence["as_of_lag_s"] == pytest.approx(5.0)


def key(rank: int) -> WorkerKey:
    return WorkerKey("job", rank)


def hung(rank: int, rule: str = "stall", verdict: Verdict = Verdict.HUNG) -> Finding:
    return Finding(key(rank), rule, verdict, {})


def test_defer_keeps_standing_verdicts_and_what_is_no_age() -> None:
    judged = [hung(0)]
    at_now = [hung(0), hung(1), hung(2), hung(3, "exit", Verdict.DEAD), hung(4)]
    findings, deferred = defer(judged, at_now, standing={key(2): "stall", key(4): "heartbeat"})
    # Rank 1's stall is deferred; rank 2's was given before the sidecar fell
    # behind and stands; an ended stream is no age; rank 4's standing verdict
    # (silence) makes no other one stand (its stall is deferred too).
    assert [(f.key.rank, f.rule) for f in findings] == [(0, "stall"), (2, "stall"), (3, "exit")]
    assert deferred == {(key(1), "stall"), (key(4), "stall")}
    pace = Pace()
    pace.note_report(T0, 2 * BEHIND_S)
    pace.note_deferred(deferred)
    pace.note_deferred(deferred | {(key(5), "stall")})
    view = pace.view(T0)
    assert view.deferred_now == 3 and view.deferred == 3  # each counted once


def test_streams_read_unevenly_age_no_stepping_worker() -> None:
    """Under load the sidecar reads some streams seconds behind the others (one
    load generator's streams were 13 s late, the other's less): the shift to a
    worker's send may pass the heartbeat limit by the sidecar's own lateness."""
    reg = Registry()
    cfg = RuleConfig()
    workers = [connected(reg, r, T0, interval_ms=100, world=10) for r in range(10)]
    for i in range(1, 31):
        for w in workers:
            reg.apply(w, report(T0 + i * 0.1, step=i, seq=i, durations=(0.1,)), T0 + i * 0.1)
    pace = Pace()
    horizon = T0 + 30.0
    reads = sorted(  # ranks 0-4 read 4 s after each send, ranks 5-9 13 s after
        (T0 + i * 0.1 + (4.0 if w.hello.rank < 5 else 13.0), i, w.hello.rank)
        for i in range(31, 300)
        for w in workers
    )
    for read_at, i, rank in reads:
        if read_at > horizon:
            break
        w = workers[rank]
        reg.apply(w, report(T0 + i * 0.1, step=i, seq=i), read_at, sampled=False)
        pace.note_report(read_at, w.ingest_lag_s)
    now = horizon + 0.15
    assert {f.key.rank for f in evaluate(reg, cfg, now)} == set(range(5, 10))  # without
    assert 4.0 <= pace.allowance(now) <= 4.4
    assert evaluate(reg, cfg, now, pace.allowance(now)) == []


def test_status_says_the_sidecar_is_behind() -> None:
    from trainprobe.proto import probe_pb2
    from trainprobe.sidecar.cli.ctl import format_status

    reply = probe_pb2.StatusReply()
    reply.ingest.CopyFrom(
        probe_pb2.IngestStatus(behind=True, own_lag_s=11.7, deferred_now=1800, deferred=1800)
    )
    text = format_status(reply)
    assert "sidecar BEHIND its reports by 11.7s" in text and "1800 deferred now" in text
    reply.ingest.behind = False
    assert "sidecar was behind its reports; 1800 verdicts deferred since start" in (
        format_status(reply).replace("\n", " ")
    )
