"""A local rank the kernel holds stopped, confirmed while its silence is still short.

A rank stopped by SIGSTOP (``/proc`` state ``T``) is the definitive culprit of
its job's hang (:func:`~trainprobe.sidecar.core.judge.evidence.definitive_reason`),
but the hang machine heard of it only once a rule fired: the 3 s stall floor
on its waiting peers, or its own heartbeat. Here the sidecar asks the kernel
sooner, for the sessions whose ``/proc`` it may read (``local``: verified by
an identity ticket on a direct stream, so the pid is the kernel's, never a
client's word):

- a session silent for :func:`silent_after_s` (1.2 report intervals, at least
  :data:`MIN_SILENT_S`; judged as the rules judge ages, the sidecar's own
  lateness earlier and from the resume after its own freeze) is read;
- a read that finds ``T`` is read again :data:`CONFIRM_GAP_S` later; two ``T``
  reads that far apart, with no report in between, make the rank *stopped*:
  a ``stopped`` finding (UNRESPONSIVE), which opens the job's episode like any
  other, and the episode's evidence round decides as it always did (a
  definitive kill, or a pause when every rank is held). A tracer's stop
  (``t``: py-spy, a debugger) and a cgroup freezer are never *stopped*;
- any other read waits :data:`READ_EVERY_S` for the next one, so a silent but
  running rank (a C call holding the GIL) costs one small read a second.

The finding waits while another rank of the job may be held too or is stuck
on its own, and the rules' own clocks (the stall floor, the heartbeat) open
the episode as before: a rank this sidecar cannot read (relayed, unverified,
another sidecar's) that has not reported since the first ``T`` read (a whole
job held at once is a pause, not a hang, and its word may not be in yet), or
a local one silent past its threshold that is not confirmed stopped (it runs
silently: the round tells it stuck only once its silence is
``stale_after_s``, and then sweeps it beside the stopped one). A whole job
stopped on this host is read by the episode's round, which finds the pause.
Pure: the engine reads ``/proc`` off its loop and says what it found
(:meth:`StoppedWatch.seen`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from trainprobe.sidecar.core.hang.state import ROUND_S
from trainprobe.sidecar.core.judge.culprit import RankSummary
from trainprobe.sidecar.core.session.model import (
    Finding,
    Verdict,
    WorkerKey,
    WorkerState,
    heard_every_ms,
)

__all__ = [
    "CONFIRM_GAP_S",
    "MIN_SILENT_S",
    "READ_EVERY_S",
    "RULE",
    "SILENT_INTERVALS",
    "StoppedWatch",
    "silent_after_s",
]

#: Report intervals of silence after which a local session is read.
SILENT_INTERVALS = 1.2
#: The least silence read: below it a late report is jitter, and a fast
#: reporter's every hiccup would cost reads.
MIN_SILENT_S = 0.5
#: Seconds between the two ``T`` reads that confirm a stop: a job-control stop
#: lasts, a stop that resumes at once (an operator's ``fg``) does not.
CONFIRM_GAP_S = 0.25
#: Seconds between reads of a silent session not (or no longer) read ``T``:
#: the evidence rounds' cadence.
READ_EVERY_S = ROUND_S
#: The finding's rule.
RULE = "stopped"
#: Reads kept per session (the two that confirm, and one in flight).
_KEEP = 3


def silent_after_s(interval_ms: int) -> float:
    """How long a session of this report interval is silent before it is read."""
    return max(MIN_SILENT_S, SILENT_INTERVALS * interval_ms / 1000.0)


@dataclass(slots=True)
class _Reads:
    pid: int
    generation: int
    #: (asked at, state letter) of reads since its last report, oldest first.
    reads: list[tuple[float, str]] = field(default_factory=list)
    asked_at: float = float("-inf")
    pending: bool = False


def _silence(w: WorkerState, now: float, allowance_s: float) -> float:
    """Its silence as the heartbeat rule judges it (rules.py)."""
    return now - allowance_s - max(w.last_report_at, w.fresh_after, w.first_seen_at)


def _readable(w: WorkerState) -> bool:
    return (
        w.local
        and w.verified
        and w.connected
        and not w.ended
        and not w.killed_by_us
        and w.hello.pid > 0
    )


class StoppedWatch:
    """Which local sessions to read now, and which the kernel holds stopped."""

    def __init__(self) -> None:
        #: Only silent readable sessions have an entry (bounded by the sessions).
        self._w: dict[WorkerKey, _Reads] = {}

    def check(
        self,
        workers: Sequence[WorkerState],
        now: float,
        allowance_s: float = 0.0,
        others: Callable[[str], Iterable[RankSummary] | None] = lambda _job: (),
        ask: bool = True,
    ) -> tuple[list[WorkerState], list[Finding]]:
        """(the sessions to read now, the ``stopped`` findings), once a tick.

        ``allowance_s``: the sidecar's own lateness (core/session/pace.py), which ages
        nobody. ``others``: a job's ranks served by other sidecars (their ages
        as shared). ``ask``: False while a read is in flight (none is due)."""
        due: list[WorkerState] = []
        stopped: list[tuple[WorkerState, float, _Reads]] = []
        silent: set[WorkerKey] = set()
        floor = now - allowance_s - MIN_SILENT_S
        for w in workers:
            if w.last_report_at > floor or not _readable(w):
                continue  # the common case first: it reported within the floor
            silence = _silence(w, now, allowance_s)
            if silence <= silent_after_s(heard_every_ms(w)):
                continue
            silent.add(w.key)
            r = self._w.get(w.key)
            if r is None or r.pid != w.hello.pid or r.generation != w.generation:
                r = self._w[w.key] = _Reads(w.hello.pid, w.generation)
            heard = now - allowance_s - silence
            r.reads = [x for x in r.reads if x[0] >= heard]
            if _confirmed(r.reads):
                stopped.append((w, silence, r))
            if ask and not r.pending and now >= r.asked_at + _wait(r.reads):
                r.pending, r.asked_at = True, now
                due.append(w)
        for key in [k for k in self._w if k not in silent]:
            del self._w[key]  # it reported, ended, or was killed: start afresh
        return due, self._findings(stopped, workers, now, allowance_s, others)

    def seen(self, w: WorkerState, letter: str, asked_at: float) -> None:
        """What a read of ``w`` asked at ``asked_at`` found: the kernel's state
        letter ("" when gone or its pid was reused, "?" when the read failed)."""
        r = self._w.get(w.key)
        if r is None or r.pid != w.hello.pid or r.generation != w.generation:
            return
        r.pending = False
        if asked_at < w.last_report_at:
            return  # it reported while we read: that report is the newer word
        r.reads = [*r.reads, (asked_at, letter)][-_KEEP:]

    def _findings(
        self,
        stopped: list[tuple[WorkerState, float, _Reads]],
        workers: Sequence[WorkerState],
        now: float,
        allowance_s: float,
        others: Callable[[str], Iterable[RankSummary] | None],
    ) -> list[Finding]:
        out: list[Finding] = []
        blocked: dict[str, bool] = {}
        confirmed = {w.key for w, _, _ in stopped}
        for w, silence, r in stopped:
            job = w.hello.job_id
            if job not in blocked:
                since = r.reads[-2][0]
                blocked[job] = _silent_beside(
                    job, confirmed, since, workers, now, allowance_s, others(job)
                )
            if blocked[job]:
                continue
            (t0, _), (t1, _) = r.reads[-2], r.reads[-1]
            f = Finding(
                w.key,
                RULE,
                Verdict.UNRESPONSIVE,
                {
                    "report_age_s": round(silence, 3),
                    "state": "T",
                    "reads": len(r.reads),
                    "read_gap_s": round(t1 - t0, 3),
                    "silent_after_s": silent_after_s(heard_every_ms(w)),
                },
                w.hello.pid,
            )
            lag = allowance_s + (0.0 if w.fresh_after else w.ingest_lag_s)
            if lag >= 0.001:  # as the heartbeat rule says it: the onset is that much earlier
                f.evidence["as_of_lag_s"] = round(lag, 3)
            out.append(f)
        return out

    def __len__(self) -> int:
        return len(self._w)


def _confirmed(reads: list[tuple[float, str]]) -> bool:
    """The last two reads both ``T`` (a job-control stop), far enough apart."""
    return (
        len(reads) >= 2
        and reads[-1][1] == "T"
        and reads[-2][1] == "T"
        and reads[-1][0] - reads[-2][0] >= CONFIRM_GAP_S
    )


def _wait(reads: list[tuple[float, str]]) -> float:
    """Seconds after the last read before the next: soon to confirm a ``T``."""
    if not reads:
        return 0.0
    if reads[-1][1] == "T" and not _confirmed(reads):
        return CONFIRM_GAP_S
    return READ_EVERY_S


def _silent_beside(
    job: str,
    confirmed: set[WorkerKey],
    since: float,
    workers: Sequence[WorkerState],
    now: float,
    allowance_s: float,
    remote: Iterable[RankSummary] | None,
) -> bool:
    """Whether another live rank of ``job``, not confirmed stopped here, may be
    held too or is stuck on its own (``since``: the first read that found the
    stopped rank ``T``).

    A rank this sidecar cannot read (relayed, unverified, another sidecar's)
    runs, on its own word, only if it reported after that read: one that
    stopped with the whole job (a pause) may have reported a moment before,
    and its word is not in yet. A local one that runs silently is stuck on its
    own, which the episode's round tells only once its silence is
    ``stale_after_s`` (``refine``'s ``stuck``); a local one held too is read
    held by the round itself (a pause)."""
    for w in workers:
        if w.hello.job_id != job or w.key in confirmed:
            continue
        if not w.connected or w.ended or w.killed_by_us:
            continue
        if not _readable(w):
            if w.last_report_at <= since:
                return True
        elif _silence(w, now, allowance_s) > silent_after_s(heard_every_ms(w)):
            return True
    if remote is None:
        return True  # only the job's digest is here (Ray): its other ranks are on their way
    return any(not s.ended and s.report_age_s >= now - since for s in remote)
