"""``sync_latency`` never blames a rank for waiting: the pure core, by hand-set time.

Rank 1 enters the allreduce 6.4 s after rank 0 (asleep in its step). Rank 0's
sync took 6.4 s, rank 1's 10 ms: the waiter's long sync is the late rank's
doing, which the progress rules judge, and is no DEGRADED finding against
rank 0. A collective that both ranks entered together and that still took
6.4 s is slow of itself, and is one.
"""

from __future__ import annotations

from trainprobe.sidecar.core.judge import RuleConfig, evaluate
from trainprobe.sidecar.core.session import (
    CollectiveData,
    GroupSeqData,
    HelloData,
    Registry,
    ReportData,
    SyncData,
    Verdict,
    WorkerState,
)

CFG = RuleConfig(sync_latency_s=5, sync_timeout_s=600, heartbeat_timeout_s=1e6)
SEQ = 5


def ns(t: float) -> int:
    return int(t * 1e9)


def report(t: float, seq: int, sync: SyncData | None = None) -> ReportData:
    """Sent at worker time ``t`` (the clocks agree here), the step counted at ``t``."""
    return ReportData(
        seq=seq,
        mono_ns=ns(t),
        wall_ns=1,
        has_step=True,
        last_step=seq,
        last_step_mono_ns=ns(t),
        total_steps=seq,
        sync=sync,
    )


def entered(at: float) -> SyncData:
    """The window in which the rank issued collective SEQ at ``at`` and waits in it."""
    g = GroupSeqData("default", SEQ, SEQ - 1, ns(at), "allreduce", SEQ, (SEQ,), (ns(at),))
    return SyncData(groups=(g,))


def idle() -> SyncData:
    """A window without collectives: the rank has not issued SEQ yet."""
    return SyncData(groups=(GroupSeqData("default", SEQ - 1, SEQ - 1),))


def finished(start: float, end: float, issued_at: float | None = None) -> SyncData:
    """The window in which collective SEQ (issued at ``start``) completed at ``end``."""
    starts = ((SEQ,), (ns(start),)) if issued_at is not None else ((), ())
    g = GroupSeqData("default", SEQ, SEQ, 0, "", 0, *starts)
    sample = CollectiveData("default", SEQ, "allreduce", 64, ns(start), ns(end))
    return SyncData(1, end - start, end - start, 64, end - start, (g,), (sample,))


def ranks(reg: Registry) -> tuple[WorkerState, WorkerState]:
    out = []
    for rank in (0, 1):
        w = reg.open(HelloData(1, "t", "job", rank, rank, 2, "host", 1000 + rank, 100), 100.0)
        # Four collectives done together: both ranks are members of the group.
        g = GroupSeqData("default", SEQ - 1, SEQ - 1, 0, "", 0, (1, 2, 3, 4), (ns(99.9),) * 4)
        reg.apply(w, report(100.0, 1, SyncData(groups=(g,))), 100.0)
        out.append(w)
    return out[0], out[1]


def slow_syncs(reg: Registry, now: float) -> list[int]:
    return [f.key.rank for f in evaluate(reg, CFG, now) if f.rule == "sync_latency"]


def test_the_rank_that_waited_for_a_late_peer_is_not_degraded() -> None:
    reg = Registry()
    r0, r1 = ranks(reg)
    reg.apply(r0, report(101.0, 2, entered(100.5)), 101.0)  # rank 0 waits in SEQ
    reg.apply(r1, report(101.0, 2, idle()), 101.0)  # rank 1 sleeps before it
    for t in (102.0, 103.0, 104.0, 105.0, 106.0):  # reports go on; the engine sweeps each tick
        reg.apply(r0, report(t, int(t) - 99, entered(100.5)), t)
        reg.apply(r1, report(t, int(t) - 99, idle()), t)
        reg.arrivals.sweep(t)
    # Rank 1 wakes at 106.9 and enters; both finish at 106.91 and report.
    reg.apply(r1, report(107.0, 8, finished(106.9, 106.91, issued_at=106.9)), 107.0)
    reg.apply(r0, report(107.0, 8, finished(100.5, 106.91)), 107.0)
    reg.arrivals.sweep(107.0)
    assert slow_syncs(reg, 107.1) == []


def test_the_waiter_is_spared_whichever_report_comes_first() -> None:
    """The late rank's report of entering may come after the waiter's of finishing."""
    reg = Registry()
    r0, r1 = ranks(reg)
    for t in (101.0, 102.0, 103.0, 104.0, 105.0, 106.0):
        reg.apply(r0, report(t, int(t) - 99, entered(100.5)), t)
        reg.apply(r1, report(t, int(t) - 99, idle()), t)
        reg.arrivals.sweep(t)
    reg.apply(r0, report(107.0, 8, finished(100.5, 106.91)), 107.0)
    assert slow_syncs(reg, 107.05) == []
    reg.apply(r1, report(107.1, 8, finished(106.9, 106.91, issued_at=106.9)), 107.1)
    assert slow_syncs(reg, 107.2) == []


def test_a_collective_entered_together_that_is_slow_is_still_degraded() -> None:
    reg = Registry()
    r0, r1 = ranks(reg)
    for t in (101.0, 102.0, 103.0, 104.0, 105.0, 106.0):
        reg.apply(r0, report(t, int(t) - 99, entered(100.5)), t)
        reg.apply(r1, report(t, int(t) - 99, entered(100.52)), t)
        reg.arrivals.sweep(t)
    reg.apply(r0, report(107.0, 8, finished(100.5, 106.91)), 107.0)
    reg.apply(r1, report(107.0, 8, finished(100.52, 106.91)), 107.0)
    assert slow_syncs(reg, 107.1) == [0, 1]


def test_a_wait_that_explains_only_part_of_the_sync_leaves_it_slow() -> None:
    """Rank 1 came 1 s late, but the collective took 7 s more after that: slow."""
    reg = Registry()
    r0, r1 = ranks(reg)
    reg.apply(r0, report(101.0, 2, entered(100.5)), 101.0)
    reg.apply(r1, report(101.0, 2, idle()), 101.0)
    for t in (102.0, 103.0, 104.0, 105.0, 106.0, 107.0, 108.0):
        reg.apply(r0, report(t, int(t) - 99, entered(100.5)), t)
        reg.apply(r1, report(t, int(t) - 99, entered(101.5)), t)
        reg.arrivals.sweep(t)
    reg.apply(r0, report(109.0, 10, finished(100.5, 108.6)), 109.0)
    reg.apply(r1, report(109.0, 10, finished(101.5, 108.6)), 109.0)
    assert slow_syncs(reg, 109.1) == [0, 1]


def test_a_wait_the_sidecar_judged_spares_the_waiter_whatever_the_numbering() -> None:
    """torchft's replicas number their collectives apart (one joined later): no
    arrival comparison holds, but the sidecar saw rank 0 wait in seq 13
    (``sync_inflight``), and that wait's end is no DEGRADED finding."""
    reg = Registry()
    r0, r1 = ranks(reg)
    waits = GroupSeqData("default", 13, 12, ns(100.5), "allreduce", 13, (13,), (ns(100.5),))
    ahead = GroupSeqData("default", 40, 40)  # the other replica's own numbering
    for t in (101.0, 102.0, 103.0, 104.0):
        reg.apply(r0, report(t, int(t) - 99, SyncData(groups=(waits,))), t)
        reg.apply(r1, report(t, int(t) - 99, SyncData(groups=(ahead,))), t)
        reg.arrivals.sweep(t)
    reg.set_verdict(r0.key, Verdict.HUNG, "sync_inflight")  # what the engine's tick set
    sample = CollectiveData("default", 13, "allreduce", 64, ns(100.5), ns(110.9))
    done = SyncData(1, 10.4, 10.4, 64, 10.4, (GroupSeqData("default", 13, 13),), (sample,))
    reg.apply(r0, report(111.0, 12, done), 111.0)
    reg.set_verdict(r0.key, Verdict.OK, "")  # the next tick: the wait is over
    assert slow_syncs(reg, 111.1) == []
    assert slow_syncs(reg, 111.2) == []


def test_a_first_collective_before_the_first_step_is_the_start_up_not_a_slow_sync() -> None:
    """Rank 0, before its first step, waits 10.4 s in its first collective for
    rank 1, asleep in its start-up (rule ``startup_straggler`` names it, and it
    is killed): the collective ends there, failed, and rank 1 never entered it,
    so no arrival says rank 0 waited. That wait is the start-up's, judged by
    the start-up rules, and no DEGRADED finding against rank 0 (seen under Ray
    Train: rank 0 of a Hugging Face Trainer in its first step's gather)."""
    reg = Registry()
    r0 = reg.open(HelloData(1, "t", "job", 0, 0, 2, "host", 1000, 100), 100.0)
    r1 = reg.open(HelloData(1, "t", "job", 1, 1, 2, "host", 1001, 100), 100.0)
    first = GroupSeqData("default", 1, 0, ns(100.5), "all_gather", 1, (1,), (ns(100.5),))
    for t in (101.0, 102.0, 104.0, 106.0, 108.0, 110.0):
        reg.apply(r0, no_step(t, int(t) - 100, SyncData(groups=(first,))), t)
        reg.apply(
            r1, no_step(t, int(t) - 100, SyncData(groups=(GroupSeqData("default", 0, 0),))), t
        )
        reg.arrivals.sweep(t)
    sample = CollectiveData("default", 1, "all_gather", 8, ns(100.5), ns(110.9))
    done = SyncData(1, 10.4, 10.4, 8, 10.4, (GroupSeqData("default", 1, 1),), (sample,))
    reg.apply(r0, no_step(111.0, 12, done), 111.0)
    assert slow_syncs(reg, 111.1) == []


def no_step(t: float, seq: int, sync: SyncData) -> ReportData:
    """A report of a rank that has not ended a step yet."""
    return ReportData(seq=seq, mono_ns=ns(t), wall_ns=1, sync=sync)
