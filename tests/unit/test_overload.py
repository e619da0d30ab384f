"""The shedding rule (core/session/overload.py) with a fake clock, and what a late report keeps."""

from __future__ import annotations

import pytest

from tests.core_builders import hello, report
from trainprobe.sidecar.core.incident.incidents import group_incidents
from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.session import Registry, Shedder
from trainprobe.sidecar.core.session.model import WorkerState, trim_applied


def test_a_report_is_late_past_one_second_or_two_intervals() -> None:
    s = Shedder()
    assert not s.is_late(0.9, interval_s=0.1)
    assert s.is_late(1.01, interval_s=0.1)
    assert not s.is_late(1.9, interval_s=1.0)  # a 1 s hook: two intervals
    assert s.is_late(2.01, interval_s=1.0)


def test_load_says_overloaded_for_a_window_after_the_last_shed() -> None:
    s = Shedder(window_s=10.0)
    for i in range(100):
        s.note(100.0 + i * 0.01, 0.05, shed=False)
    assert not s.load(101.0).overloaded
    s.note(101.0, 3.5, shed=True)
    s.note(101.1, 2.0, shed=True)
    load = s.load(102.0)
    assert load.overloaded and load.shed == 2 and load.applied == 100
    assert load.max_lag_s == 3.5 and load.shed_per_s > 0
    assert s.load(110.9).overloaded
    later = s.load(111.2)
    assert not later.overloaded and later.shed == 2  # the count stays
    assert s.load(140.0).max_lag_s == 0.0  # the lag shown is recent only


T0 = 100.0  # worker and sidecar clocks agree; the worker reports every 0.1 s


def _registry_with_worker() -> tuple[Registry, WorkerState]:
    reg = Registry()
    w = reg.open(hello(rank=0, interval_ms=100), T0)
    for i in range(30):  # past the warm-up: an auto threshold of 3 s
        reg.apply(w, report(T0 + i * 0.1, step=i, seq=i, durations=(0.1,)), T0 + i * 0.1)
    return reg, w


def test_a_late_report_keeps_liveness_and_drops_samples() -> None:
    reg, w = _registry_with_worker()
    samples, p99 = len(w.step_samples), w.step_p99_s
    # Sent at 3.0, applied at 6.0: the sidecar was 3 s behind.
    reg.apply(w, report(T0 + 3, step=80, seq=31, durations=(9.0,) * 50), T0 + 6, sampled=False)
    assert w.last_step == 80 and w.last_report_at == T0 + 6
    assert w.ingest_lag_s == pytest.approx(3.0)
    assert len(w.step_samples) == samples and w.step_p99_s == p99  # no sample taken


def test_the_backlog_ages_no_stepping_worker_and_latency_counts_from_the_onset() -> None:
    cfg = RuleConfig()
    reg, w = _registry_with_worker()
    # Backlogged 2.5 s: each report was sent 2.5 s before the rules saw it.
    for i in range(30, 60):
        t = T0 + i * 0.1
        reg.apply(w, report(t, step=i, seq=i, durations=(0.1,)), t + 2.5, sampled=False)
    assert evaluate(reg, cfg, T0 + 5.9 + 2.5) == []  # stepping: no stall for our backlog
    # The worker hangs after step 59 (its last step at 5.9); its reports since
    # say so, and arrive 2.5 s late. The 3 s stall threshold passes at 8.9.
    for i in range(60, 95):
        t = T0 + i * 0.1
        reg.apply(w, report(t, step=59, step_t_s=T0 + 5.9, seq=i), t + 2.5, sampled=False)
        now = t + 2.5
        if evaluate(reg, cfg, now):
            break
    assert now == pytest.approx(T0 + 9.0 + 2.5, abs=0.11)  # the verdict, 2.5 s late
    found = evaluate(reg, cfg, now)
    found = evaluate(reg, cfg, now)
    assert [f.rule for f in found] == ["stall"]
    (incident,) = group_incidents(found, {w.key: w}, now, 0.0)
    # Onset as the reports show it (the last step, at 5.9), not 2.5 s later:
    # the latency is the truth, 3.1 s of threshold plus 2.5 s of our backlog.
    assert incident.onset_at == pytest.approx(T0 + 5.9, abs=0.01)
    assert incident.detection_latency_s == pytest.approx(now - (T0 + 5.9), abs=0.01)
    assert incident.detection_latency_s > 5.5
    assert incident.ingest_lag_s == pytest.approx(2.5, abs=0.01)
    assert incident.to_record()["ingest_lag_s"] == pytest.approx(2.5, abs=0.01)


def test_an_applied_report_keeps_only_its_last_steps() -> None:
    r = report(1.0, step=300, seq=1, durations=(0.01,) * 256)
    trim_applied(r)
    assert len(r.recent_step_s) == len(r.recent_steps) == len(r.recent_step_end_mono_ns) == 16
    assert r.recent_steps[-1] == 300


def test_an_applied_report_keeps_only_its_slowest_collective_sample() -> None:
    """What the sync_latency finding and the incident span name, wherever it was
    among the samples (it was cut to the last 16, ~4 KB a session)."""
    import dataclasses

    from trainprobe.sidecar.core.session.model import CollectiveData, SyncData

    samples = tuple(
        CollectiveData(
            "default", i, "allreduce", 1 << 20, 1000 * i, 1000 * i + (9000 if i == 3 else 10), i
        )
        for i in range(40)
    )
    r = dataclasses.replace(report(1.0, step=300, seq=1), sync=SyncData(count=40, samples=samples))
    trim_applied(r)
    assert r.sync is not None and [c.seq for c in r.sync.samples] == [3]
