"""The sidecar watches its own clock (issue 12, item 5), with a fake clock.

A frozen or lagging sidecar must not blame its workers for its own pause:
after a freeze every worker is judged only once a report sent after it has
arrived, and ages are judged as of each report's send, not its arrival.
"""

from __future__ import annotations

from pathlib import Path

from tests.core_builders import fired, lockstep, report
from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.core.incident.policy import ActionPolicy
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.session import Registry, StallPolicy
from trainprobe.sidecar.engine.loop import Engine

T0 = 100.0
CFG = RuleConfig(heartbeat_timeout_s=3.0, stall=StallPolicy(timeout_s=2.0))


def test_a_freeze_holds_verdicts_until_each_worker_reports_again() -> None:
    reg = Registry()
    lockstep(reg, 2, T0 + 5)
    frozen_until = T0 + 17  # the sidecar was stopped for 12 s
    # Without the gate both ranks look stalled and silent for 12 s.
    assert fired(evaluate(reg, CFG, frozen_until)) == {(0, "heartbeat"), (1, "heartbeat")}
    reg.hold_until_fresh(frozen_until)
    assert evaluate(reg, CFG, frozen_until) == []
    # A report sent during the freeze, read after it, opens no gate.
    w0, w1 = reg.get(next(iter(reg)).key), list(reg)[1]
    reg.apply(w0, report(T0 + 9, step=90, seq=90), frozen_until + 0.01)
    assert w0.fresh_after == frozen_until
    assert evaluate(reg, CFG, frozen_until + 0.02) == []
    # Rank 0 sends a fresh report, still stepping: judged again, and fine.
    reg.apply(w0, report(frozen_until + 0.1, step=171, seq=171), frozen_until + 0.1)
    assert w0.fresh_after == 0.0
    assert evaluate(reg, CFG, frozen_until + 0.2) == []
    # Rank 1 stopped stepping at T0+5 (the worker's clock says so): once a fresh
    # report arrives, its stall is found from the worker's own step time.
    reg.apply(w1, report(frozen_until + 0.1, step=50, step_t_s=T0 + 5, seq=171), frozen_until + 0.1)
    assert fired(evaluate(reg, CFG, frozen_until + 0.2)) == {(1, "stall")}


def test_after_a_freeze_silence_counts_from_the_resume() -> None:
    reg = Registry()
    lockstep(reg, 1, T0 + 5)
    resumed = T0 + 40
    reg.hold_until_fresh(resumed)
    assert evaluate(reg, CFG, resumed + 2.9) == []
    found = evaluate(reg, CFG, resumed + 3.1)
    assert fired(found) == {(0, "heartbeat")}
    assert 3.0 < found[0].evidence["report_age_s"] < 3.2


def test_a_stream_broken_by_our_freeze_is_not_a_death() -> None:
    reg = Registry()
    lockstep(reg, 2, T0 + 5)
    resumed = T0 + 35
    reg.hold_until_fresh(resumed)
    w0, w1 = list(reg)
    # Both hooks' writes timed out during the freeze; rank 0 still runs, rank
    # 1's process is gone (the kernel says so): only rank 1 is DEAD.
    reg.close(w0, w0.generation, "vanished", resumed + 0.01, pid_alive=True)
    reg.close(w1, w1.generation, "vanished", resumed + 0.01, pid_alive=False)
    assert fired(evaluate(reg, CFG, resumed + 0.1)) == {(1, "exit")}
    # Rank 0 never comes back: unresponsive, counted from the resume.
    assert fired(evaluate(reg, CFG, resumed + 3.2)) == {(0, "heartbeat"), (1, "exit")}


def test_ages_come_from_the_send_time_when_the_sidecar_lags() -> None:
    reg = Registry()
    lockstep(reg, 1, T0 + 5)
    w = next(iter(reg))
    # The sidecar's loop falls 2.5 s behind: each report is read 2.5 s after it
    # was sent, and the worker steps every 0.1 s throughout.
    for i in range(51, 60):
        sent = T0 + i * 0.1
        reg.apply(w, report(sent, step=i, seq=i), sent + 2.5)
    assert 2.49 < w.ingest_lag_s < 2.51
    read_at = T0 + 5.9 + 2.5
    assert evaluate(reg, CFG, read_at + 0.1) == []
    # Judged as of arrival it would have looked stalled 2.6 s (> 2 s).
    w.ingest_lag_s = 0.0
    assert fired(evaluate(reg, CFG, read_at + 0.1)) == {(0, "stall")}


def test_a_client_clock_cannot_hide_its_own_hang() -> None:
    reg = Registry()
    lockstep(reg, 1, T0 + 5)
    w = next(iter(reg))
    # Reports whose clock suddenly claims they were sent 50 s before they came,
    # each with a step just before that: judged "as of the send" without a
    # bound, the step would look fresh. The shift is bounded by the heartbeat
    # limit, so the stall (no step since T0+5) is still found.
    for i in range(1, 10):
        t = T0 + 5 + i
        reg.apply(w, report(t - 50, step=50 + i, step_t_s=t - 50.1, seq=100 + i), t)
    assert fired(evaluate(reg, CFG, T0 + 15)) == {(0, "stall")}


class NoActions:
    async def execute(self, incident: object) -> None:
        raise AssertionError("no incident expected")

    async def sweep(self, *args: object, **kw: object) -> None:
        raise AssertionError("no sweep expected")


def test_the_engine_notices_a_gap_between_its_ticks(tmp_path: Path) -> None:
    now = [T0 + 5]
    reg = Registry()
    lockstep(reg, 2, now[0])
    engine = Engine(
        reg, CFG, ActionPolicy(), IncidentLog(tmp_path / "i.jsonl"), NoActions(), lambda: now[0]
    )
    engine.freeze_after_s = 1.0
    assert engine.tick() == []
    now[0] += 0.1
    assert engine.tick() == [] and engine.freezes == 0
    now[0] += 12.0  # SIGSTOP ... SIGCONT
    assert engine.tick() == []
    assert engine.freezes == 1
    assert all(w.fresh_after == now[0] for w in reg)
