"""Turn a worker's full state into the compact :class:`RankSummary`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from trainprobe.sidecar.core.judge.culprit import GroupProgress, RankSummary
from trainprobe.sidecar.core.session.model import Verdict, WorkerState, heard_every_ms

__all__ = ["NORMAL_STEP_FLOOR_S", "previous_attempt", "session_times", "summarize"]

#: The least "normal step time" (s): a report late on a loaded node must not
#: make a stepping rank look stuck. A verdict needs 3 s without progress (the
#: shipped ``stall`` floor and ``sync_timeout_s``), so this delays no culprit.
NORMAL_STEP_FLOOR_S = 2.0


def summarize(
    w: WorkerState, now: float, heartbeat_limit_s: float, verdict: Verdict | None = None
) -> RankSummary:
    """What other sidecars (and the culprit analysis) need to know of ``w`` at ``now``.

    ``verdict``: ``w``'s verdict as of ``now`` where it is newer than the session's
    (a step of the hang machine, whose verdicts its effects are yet to set)."""
    report_age = max(0.0, now - w.last_report_at)
    groups: tuple[GroupProgress, ...] = ()
    sync = w.last_report.sync if w.last_report is not None else None
    if sync is not None:
        groups = tuple(
            GroupProgress(
                group=g.group,
                issued=g.issued,
                completed=g.completed,
                inflight_age_s=(
                    max(0.0, now - w.inflight_since[g.group])
                    if g.group in w.inflight_since
                    else None
                ),
                inflight_op=g.inflight_op,
                inflight_seq=g.inflight_seq,
            )
            for g in sync.groups
        )
    wait, wait_age = _ft_wait(w, now)
    return RankSummary(
        rank=w.hello.rank,
        world_size=w.hello.world_size,
        host=w.hello.host,
        pid=w.hello.pid,
        node=w.hello.ray.node_id,
        reporting=w.connected and report_age <= heartbeat_limit_s,
        ended=w.ended,
        report_age_s=round(report_age, 3),
        has_step=w.has_step,
        step=w.last_step,
        step_age_s=round(max(0.0, now - w.last_step_at), 3) if w.has_step else 0.0,
        phases=tuple(p.name for p in w.active_phases),
        groups=groups,
        verdict=(verdict or w.verdict).value,
        replica=w.hello.replica.replica_id if w.hello.replica is not None else "",
        ft_wait=wait,
        ft_wait_age_s=wait_age,
        verified=w.verified,
        normal_step_s=_normal_step_s(w),
    )


def _normal_step_s(w: WorkerState) -> float:
    """How old its last step may be while it steps normally: twice its own p99
    step time (never a peer's) plus two intervals at which the sidecar hears from
    it (a step shows only in the next report), at least ``NORMAL_STEP_FLOOR_S``.
    0: no step times yet."""
    if w.step_p99_s is None:
        return 0.0
    heard_s = heard_every_ms(w) / 1000.0
    return round(max(NORMAL_STEP_FLOOR_S, 2.0 * (w.step_p99_s + heard_s)), 3)


def _ft_wait(w: WorkerState, now: float) -> tuple[str, float]:
    """What ``w`` waits for inside torchft, and for how long (its last report's word)."""
    progress = w.last_report.replica if w.last_report is not None else None
    if w.hello.replica is None or progress is None or not progress.waiting:
        return "", 0.0
    since = w.to_local(progress.waiting_since_mono_ns) if progress.waiting_since_mono_ns else now
    return progress.waiting, round(max(0.0, now - since), 3)


def previous_attempt(sessions: Iterable[tuple[int, float, float, bool]]) -> set[int]:
    """The ranks whose session is of an earlier attempt than the job's live ones.

    ``sessions``: (rank, first seen, last heard, live) of each session of one
    job, on the sidecar's clock. An ended session last heard before every live
    one began cannot be the peer they wait for in a collective: their
    processes, and the process group they wait in, came after it (a restart:
    Ray Train's new group, torchrun's next attempt). One still heard while a
    live peer ran is of the same attempt, so its death stays definitive; a
    live one is judged by the rules (a process that reconnects keeps its
    session and its start). One pass: a coordinator's job has thousands.
    """
    rows = list(sessions)
    earliest = min((seen for _, seen, _, live in rows if live), default=None)
    if earliest is None:
        return set()
    return {rank for rank, _, heard, live in rows if not live and heard < earliest}


def session_times(sessions: Iterable[WorkerState]) -> Iterator[tuple[int, float, float, bool]]:
    """(rank, first seen, last heard, live) of each session, for :func:`previous_attempt`.

    An ended stream was heard until it ended: a rank killed before its first
    report (a report a second) has only its Hello, which may come a moment
    before its peers' Hellos, yet its stream was open while they ran."""
    for w in sessions:
        live = w.connected and not w.ended
        yield w.hello.rank, w.first_seen_at, max(w.last_report_at, w.ended_at), live
