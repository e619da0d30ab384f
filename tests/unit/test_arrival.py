"""Arrival lag: who entered each shared collective late, on a fake clock."""

from __future__ import annotations

import pytest

from tests.core_builders import NS, connected, report
from trainprobe.sidecar.core.session import (
    GroupSeqData,
    Registry,
    SyncData,
    ValidationError,
    validate_report,
)
from trainprobe.sidecar.core.session.arrival import MAX_GROUPS_PER_JOB, MAX_OPEN, STARTS_PER_REPORT

T0 = 100.0


def _sync(starts: dict[int, float], issued: int | None = None, group: str = "default") -> SyncData:
    seqs = tuple(sorted(starts))
    top = issued if issued is not None else (seqs[-1] if seqs else 0)
    return SyncData(
        groups=(
            GroupSeqData(
                group,
                top,
                top,
                started_seqs=seqs,
                started_mono_ns=tuple(int(starts[s] * NS) for s in seqs),
            ),
        )
    )


def _send(reg: Registry, w, now: float, starts: dict[int, float], skew_s: float = 0.0, **kw):
    """A report sent at sidecar time ``now`` by a worker whose clock reads ``skew_s`` more."""
    shifted = {s: t + skew_s for s, t in starts.items()}
    reg.apply(w, report(now + skew_s, sync=_sync(shifted, **kw)), now)


def test_lag_is_measured_from_the_first_rank_and_closes_when_all_arrived() -> None:
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    for k in range(10):
        t = T0 + k
        _send(reg, r0, t + 0.5, {k + 1: t})
        _send(reg, r1, t + 0.5, {k + 1: t + 0.2})
    assert len(reg.arrivals) == 0  # every comparison closed as soon as both arrived
    s0, s1 = r0.arrival.summary(), r1.arrival.summary()
    assert s0.count == 10 and s0.max_s == 0.0
    assert s1.count == 10 and s1.p50_s == pytest.approx(0.2) and s1.missed == 0
    assert s1.group == "default"
    # One exported value per report window; each rank's last window is still open.
    assert len(reg.arrivals.lags) == 18


def test_a_window_of_many_collectives_exports_its_worst_lag_once() -> None:
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    _send(reg, r0, T0 + 0.5, {1: T0, 2: T0 + 0.1, 3: T0 + 0.2})
    _send(reg, r1, T0 + 0.5, {1: T0 + 0.05, 2: T0 + 0.4, 3: T0 + 0.25})
    assert r1.arrival.summary().last_s == pytest.approx(0.3)  # the open window counts
    _send(reg, r1, T0 + 1.5, {})
    (late,) = [lag for w, _, lag, _ in reg.arrivals.lags if w is r1]
    assert late == pytest.approx(0.3)
    assert r1.arrival.summary().count == 3


def test_each_ranks_clock_offset_is_applied() -> None:
    # Rank 1's monotonic clock reads 5,000 s more than rank 0's (another boot):
    # its issue times only compare once mapped onto the sidecar's clock.
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    for k in range(5):
        t = T0 + k
        _send(reg, r0, t + 0.3, {k + 1: t + 0.1})
        _send(reg, r1, t + 0.3, {k + 1: t}, skew_s=5000.0)
    assert r0.arrival.summary().p50_s == pytest.approx(0.1)
    assert r1.arrival.summary().max_s == 0.0


def test_a_rank_that_never_enters_is_missed_after_the_close_delay() -> None:
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    _send(reg, r0, T0 + 0.5, {1: T0})
    _send(reg, r1, T0 + 0.5, {1: T0})
    # Seq 2: rank 0 enters at T0+1; rank 1 keeps reporting, still at issued=1.
    _send(reg, r0, T0 + 1.5, {2: T0 + 1.0})
    for k in range(2, 4):
        _send(reg, r1, T0 + k, {}, issued=1)
        reg.arrivals.sweep(T0 + k)
    assert r1.arrival.summary().missed == 0  # not yet: 3 s have not passed
    _send(reg, r1, T0 + 4.6, {}, issued=1)
    reg.arrivals.sweep(T0 + 4.6)
    s1 = r1.arrival.summary()
    assert s1.missed == 1 and s1.last_s == pytest.approx(3.6)  # waited up to its last report
    assert r0.arrival.summary().missed == 0
    assert len(reg.arrivals) == 0


def test_a_rank_that_entered_but_whose_time_was_not_sent_is_not_missed() -> None:
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    _send(reg, r0, T0 + 0.5, {1: T0})
    _send(reg, r1, T0 + 0.5, {1: T0})
    _send(reg, r0, T0 + 1.5, {2: T0 + 1.0})
    _send(reg, r1, T0 + 1.5, {}, issued=2)  # issued seq 2, its time trimmed away
    reg.arrivals.sweep(T0 + 10)
    assert r1.arrival.summary().missed == 0


def test_a_late_report_of_a_closed_collective_opens_nothing() -> None:
    reg = Registry()
    r0, r1, r2 = (connected(reg, r, T0) for r in range(3))
    for w in (r0, r1, r2):
        _send(reg, w, T0 + 0.5, {1: T0})
    _send(reg, r0, T0 + 1.5, {2: T0 + 1})
    _send(reg, r1, T0 + 1.5, {2: T0 + 1})
    reg.arrivals.sweep(T0 + 10)  # seq 2 closes without rank 2
    _send(reg, r2, T0 + 10.5, {2: T0 + 9})
    assert len(reg.arrivals) == 0


def test_memory_is_bounded_per_group_and_per_job() -> None:
    reg = Registry()
    r0 = connected(reg, 0, T0)
    connected(reg, 1, T0)
    for k in range(400):  # rank 1 never reports: nothing closes before the delay
        starts = {k * STARTS_PER_REPORT + i + 1: T0 + k for i in range(STARTS_PER_REPORT)}
        _send(reg, r0, T0 + k * 0.001, starts)
    assert len(reg.arrivals) == MAX_OPEN
    for g in range(MAX_GROUPS_PER_JOB + 10):
        _send(reg, r0, T0 + 1, {1: T0}, group=f"g{g}")
    assert len(reg.arrivals._groups) == MAX_GROUPS_PER_JOB


def test_a_busy_group_is_thinned_alike_on_every_rank() -> None:
    # 40 collectives per report (a DDP step of many buckets): every rank compares
    # the same few, and a straggler still shows in each window.
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    for k in range(50):
        t = T0 + k
        base = {k * 40 + i + 1: t + i * 0.001 for i in range(40)}
        _send(reg, r0, t + 0.5, base)
        _send(reg, r1, t + 0.5, {s: v + 0.1 for s, v in base.items()})
    grp = reg.arrivals._groups[("job", "default")]
    assert grp.stride >= 8
    reg.arrivals.sweep(T0 + 100)  # those opened while the stride was changing
    assert len(reg.arrivals) == 0
    s1 = r1.arrival.summary()
    assert s1.p50_s == pytest.approx(0.1) and 50 * 40 / grp.stride / 2 <= s1.count < 50 * 40
    assert r0.arrival.summary().max_s == 0.0


def test_a_hang_on_a_skipped_seq_of_a_thinned_group_still_shows() -> None:
    # The group is thinned to every 8th seq or more; rank 1 never enters seq
    # 2003, which no stride compares. Rank 0 waits in it: its reports name it
    # as in flight, so the comparison opens and rank 1 is counted missed.
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    for k in range(50):
        t = T0 + k
        base = {k * 40 + i + 1: t + i * 0.001 for i in range(40)}
        _send(reg, r0, t + 0.5, base)
        _send(reg, r1, t + 0.5, base)
    grp = reg.arrivals._groups[("job", "default")]
    assert 2003 % grp.stride
    t = T0 + 50
    blocked = SyncData(
        groups=(GroupSeqData("default", 2003, 2002, int(t * NS), "allreduce", 2003),)
    )
    for dt in (0.2, 1.0, 2.0, 3.0, 4.0, 5.0):
        reg.apply(r0, report(t + dt, sync=blocked), t + dt)
        _send(reg, r1, t + dt, {}, issued=2000)
        reg.arrivals.sweep(t + dt)
    s1 = r1.arrival.summary()
    assert s1.missed == 1 and s1.last_s >= 3.0
    assert r0.arrival.summary().missed == 0


def test_groups_of_departed_ranks_are_forgotten() -> None:
    reg = Registry()
    r0, r1 = connected(reg, 0, T0), connected(reg, 1, T0)
    _send(reg, r0, T0 + 0.5, {1: T0})
    _send(reg, r1, T0 + 0.5, {1: T0})
    for w in (r0, r1):
        reg.close(w, w.generation, "goodbye", T0 + 1, pid_alive=False)
    reg.arrivals.sweep(T0 + 1)
    assert not reg.arrivals._groups


def test_issue_times_must_pair_with_seqs_and_stay_in_range() -> None:
    ok = report(T0, sync=_sync({1: T0, 2: T0}))
    validate_report(ok)
    bad_len = report(
        T0, sync=SyncData(groups=(GroupSeqData("default", 2, 2, 0, "", 0, (1, 2), (5,)),))
    )
    beyond = report(
        T0, sync=SyncData(groups=(GroupSeqData("default", 1, 1, 0, "", 0, (7,), (5,)),))
    )
    for r in (bad_len, beyond):
        with pytest.raises(ValidationError):
            validate_report(r)
