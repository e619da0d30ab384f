"""The early read of a silent local rank (core/hang/stopped.py), on a fake clock.

A verified local session silent for 1.2 report intervals is read from /proc;
two ``T`` reads at least ``CONFIRM_GAP_S`` apart make a ``stopped`` finding
(UNRESPONSIVE), which opens the job's episode long before the 3 s stall floor.
"""

from __future__ import annotations

from tests.core_builders import hello, report
from trainprobe.sidecar.core.hang.stopped import (
    CONFIRM_GAP_S,
    READ_EVERY_S,
    StoppedWatch,
    silent_after_s,
)
from trainprobe.sidecar.core.judge.culprit import RankSummary
from trainprobe.sidecar.core.session.hello import VerifiedProcess
from trainprobe.sidecar.core.session.model import Verdict, WorkerState
from trainprobe.sidecar.core.session.registry import Registry

T0 = 100.0


def job(n: int = 2, verified: bool = True, interval_ms: int = 1000) -> list[WorkerState]:
    """``n`` ranks that reported at T0; verified ones are local (their pid the kernel's)."""
    reg = Registry()
    out = []
    for rank in range(n):
        h = hello(rank=rank, world=n, interval_ms=interval_ms)
        w = reg.open(h, T0 - 5, VerifiedProcess(h.pid, 1000, 1) if verified else None)
        w.local = verified
        reg.apply(w, report(T0, step=10, seq=1), T0)
        out.append(w)
    return out


def ranks(ws: list[WorkerState]) -> list[int]:
    return [w.hello.rank for w in ws]


def test_silent_past_1_2_intervals_and_two_t_reads_apart_make_it_stopped() -> None:
    ws = job()
    watch = StoppedWatch()
    ws[0].last_report_at = T0 + 2.5  # rank 0 still reports; rank 1 went silent at T0
    assert silent_after_s(1000) == 1.2
    assert watch.check(ws, T0 + 1.1) == ([], [])  # 1.1 s: a late report, not read
    now = T0 + 1.3
    due, found = watch.check(ws, now)
    assert ranks(due) == [1] and found == []
    watch.seen(ws[1], "T", now)
    # The second read waits for the gap, not for the next second.
    assert watch.check(ws, now + 0.1) == ([], [])
    now += CONFIRM_GAP_S
    due, found = watch.check(ws, now)
    assert ranks(due) == [1] and found == []
    watch.seen(ws[1], "T", now)
    _, found = watch.check(ws, now + 0.05)
    (f,) = found
    assert (f.key, f.rule, f.verdict, f.pid) == (ws[1].key, "stopped", Verdict.UNRESPONSIVE, 1001)
    assert f.evidence["state"] == "T" and f.evidence["read_gap_s"] >= CONFIRM_GAP_S
    # The onset is its last report: report_age_s is its silence.
    assert abs(f.evidence["report_age_s"] - 1.6) < 1e-6  # type: ignore[operator]
    # It stands while the rank stays silent, and is read once a second to keep it current.
    assert [(f.key, f.rule) for f in watch.check(ws, now + 0.5)[1]] == [(ws[1].key, "stopped")]
    assert ranks(watch.check(ws, now + READ_EVERY_S)[0]) == [1]


def confirm(watch: StoppedWatch, ws: list[WorkerState], first: str, second: str) -> list:
    now = T0 + 1.3
    watch.check(ws, now)
    watch.seen(ws[1], first, now)
    now += CONFIRM_GAP_S
    watch.check(ws, now)
    watch.seen(ws[1], second, now)
    return watch.check(ws, now + 0.05)[1]


def test_one_t_read_then_running_is_nothing() -> None:
    ws = job()
    ws[0].last_report_at = T0 + 1.3
    watch = StoppedWatch()
    assert confirm(watch, ws, "T", "R") == []
    # A read that is not T waits a second for the next.
    assert watch.check(ws, T0 + 1.3 + CONFIRM_GAP_S + 0.5)[0] == []


def test_a_tracers_stop_is_nothing_and_is_read_once_a_second() -> None:
    ws = job()
    ws[0].last_report_at = T0 + 1.3
    watch = StoppedWatch()
    now = T0 + 1.3
    watch.check(ws, now)
    watch.seen(ws[1], "t", now)  # py-spy or a debugger: ptrace stop
    assert watch.check(ws, now + CONFIRM_GAP_S) == ([], [])
    due, _ = watch.check(ws, now + READ_EVERY_S)
    watch.seen(ws[1], "t", now + READ_EVERY_S)
    assert ranks(due) == [1] and watch.check(ws, now + READ_EVERY_S + 0.05)[1] == []


def test_two_t_reads_closer_than_the_gap_are_not_enough() -> None:
    ws = job()
    ws[0].last_report_at = T0 + 1.3
    watch = StoppedWatch()
    now = T0 + 1.3
    watch.check(ws, now)
    watch.seen(ws[1], "T", now)
    watch.seen(ws[1], "T", now + 0.1)  # a read nobody asked for so soon counts, but not as 2
    assert watch.check(ws, now + 0.15)[1] == []


def test_an_unverified_session_is_never_read() -> None:
    ws = job(verified=False)
    watch = StoppedWatch()
    for dt in (1.3, 2.0, 5.0, 30.0):
        assert watch.check(ws, T0 + dt) == ([], [])
    assert len(watch) == 0


def test_a_verified_session_on_a_relay_stream_is_not_read_here() -> None:
    ws = job()
    for w in ws:
        w.local = False  # verified by its node: that node reads its /proc
    assert StoppedWatch().check(ws, T0 + 5.0) == ([], [])


def test_the_sidecars_own_lateness_ages_nobody() -> None:
    """Behind by 0.8 s (core/session/pace.py): 1.3 s of silence is 0.5 s as judged, so
    nothing is read; nor is a session whose silence began at our own freeze."""
    ws = job()
    watch = StoppedWatch()
    assert watch.check(ws, T0 + 1.3, allowance_s=0.8) == ([], [])
    assert ranks(watch.check(ws, T0 + 2.1, allowance_s=0.8)[0]) == [0, 1]
    fresh = job()
    for w in fresh:
        w.fresh_after = T0 + 1.0  # our loop froze until then: silence counts from it
    assert StoppedWatch().check(fresh, T0 + 1.3) == ([], [])


def test_a_confirmed_stop_found_while_behind_is_deferred_until_the_silence_holds() -> None:
    ws = job()
    ws[0].last_report_at = T0 + 2.0
    watch = StoppedWatch()
    assert confirm(watch, ws, "T", "T")  # confirmed, on time
    # The sidecar then falls 1 s behind: the same silence, judged 1 s earlier, is
    # below the read threshold, so the finding waits (as a heartbeat would).
    assert watch.check(ws, T0 + 1.6, allowance_s=1.0)[1] == []


def test_a_report_after_the_first_t_read_starts_afresh() -> None:
    ws = job()
    ws[0].last_report_at = T0 + 1.3
    watch = StoppedWatch()
    now = T0 + 1.3
    watch.check(ws, now)
    watch.seen(ws[1], "T", now)
    ws[1].last_report_at = now + 0.1  # SIGCONT: it reported
    assert watch.check(ws, now + 0.2) == ([], []) and len(watch) == 0
    ws[1].last_report_at = now + 0.1
    # Silent again later: two new reads are needed.
    later = now + 0.1 + 1.3
    ws[0].last_report_at = later
    assert ranks(watch.check(ws, later)[0]) == [1]
    watch.seen(ws[1], "T", later)
    assert watch.check(ws, later + 0.05)[1] == []


def test_one_read_in_flight_at_a_time() -> None:
    ws = job()
    ws[0].last_report_at = T0 + 2.0
    watch = StoppedWatch()
    assert ranks(watch.check(ws, T0 + 1.3, ask=False)[0]) == []
    assert ranks(watch.check(ws, T0 + 1.4)[0]) == [1]
    assert watch.check(ws, T0 + 2.9)[0] == []  # its read never came back: not asked again


def test_a_silent_rank_nobody_here_can_read_holds_the_finding_back() -> None:
    """Rank 0 is relayed (its node reads it) and silent too: the job may be
    paused, with the node's word not in yet. The finding waits; once rank 0
    reports again, the stop stands."""
    ws = job()
    ws[0].local = False
    watch = StoppedWatch()
    assert confirm(watch, ws, "T", "T") == []
    ws[0].last_report_at = T0 + 1.5
    assert [f.key for f in watch.check(ws, T0 + 1.6)[1]] == [ws[1].key]


def test_another_sidecars_silent_rank_holds_the_finding_back() -> None:
    ws = job()
    ws[0].last_report_at = T0 + 2.0
    quiet = [RankSummary(rank=2, world_size=3, report_age_s=1.6)]
    watch = StoppedWatch()
    now = T0 + 1.3
    watch.check(ws, now)
    watch.seen(ws[1], "T", now)
    watch.check(ws, now + CONFIRM_GAP_S)
    watch.seen(ws[1], "T", now + CONFIRM_GAP_S)
    assert watch.check(ws, now + 0.3, others=lambda _job: quiet)[1] == []
    # Its report came after the first T read (0.3 s ago): it ran while rank 1 was stopped.
    fresh = [RankSummary(rank=2, world_size=3, report_age_s=0.2)]
    assert len(watch.check(ws, now + 0.3, others=lambda _job: fresh)[1]) == 1


def test_a_100_ms_reporter_is_read_after_half_a_second() -> None:
    ws = job(interval_ms=100)
    ws[0].last_report_at = T0 + 0.6
    assert silent_after_s(100) == 0.5
    watch = StoppedWatch()
    assert watch.check(ws, T0 + 0.45)[0] == []
    assert ranks(watch.check(ws, T0 + 0.55)[0]) == [1]


def test_a_silent_rank_beside_it_that_runs_holds_the_finding_back() -> None:
    """Rank 0 is local and silent too, and reads running (a C call holding the
    GIL): it is stuck on its own, which the episode tells only once its silence
    is stale; the rules' clocks open the episode instead, as before."""
    ws = job()
    watch = StoppedWatch()
    now = T0 + 1.3
    assert ranks(watch.check(ws, now)[0]) == [0, 1]
    watch.seen(ws[0], "R", now)
    watch.seen(ws[1], "T", now)
    watch.check(ws, now + CONFIRM_GAP_S)
    watch.seen(ws[1], "T", now + CONFIRM_GAP_S)
    assert watch.check(ws, now + 0.3)[1] == []


def test_a_whole_job_stopped_here_is_confirmed_rank_by_rank_for_the_round() -> None:
    """Both ranks stopped: once both are confirmed, both findings stand (the
    episode's round then finds every rank held: a pause)."""
    ws = job()
    watch = StoppedWatch()
    now = T0 + 1.3
    watch.check(ws, now)
    for w in ws:
        watch.seen(w, "T", now)
    watch.check(ws, now + CONFIRM_GAP_S)
    watch.seen(ws[1], "T", now + CONFIRM_GAP_S)
    assert watch.check(ws, now + 0.3)[1] == []  # rank 0 silent, not confirmed yet
    watch.seen(ws[0], "T", now + 0.3)
    found = watch.check(ws, now + 0.35)[1]
    assert sorted(f.key.rank for f in found) == [0, 1]


def test_a_relayed_rank_that_reported_just_before_the_stop_still_holds_it_back() -> None:
    """A whole job stopped at once, rank 0 relayed: its last report came just
    before the first T read of rank 1, so its silence is short, but nothing says
    it ran after: its node's word may yet make this a pause."""
    ws = job()
    ws[0].local = False
    ws[0].last_report_at = T0 + 1.25
    watch = StoppedWatch()
    assert confirm(watch, ws, "T", "T") == []
    ws[0].last_report_at = T0 + 1.56  # a report after the first T read: it runs
    assert len(watch.check(ws, T0 + 1.6)[1]) == 1
