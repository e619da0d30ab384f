"""A paused job is no hang: every live rank held, each on the kernel's word.

Pure: the evidence of an episode's round per rank
(:class:`~trainprobe.sidecar.core.judge.evidence.RankEvidence`, a relayed rank's
from its node's word: :mod:`~trainprobe.sidecar.core.hang.held`) and the job's
rank summaries in, a reason out; :func:`judge_pause` turns it into an
episode's round (no kill while paused, the job's clocks restarted at the
resume), for :mod:`~trainprobe.sidecar.core.hang.rounds`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from trainprobe.sidecar.core.hang.effects import Effect, EvidenceRound, Log, Record, ResumeJob
from trainprobe.sidecar.core.hang.episodes import Episode
from trainprobe.sidecar.core.hang.held import awaiting_word, held_kind, relayed_evidence
from trainprobe.sidecar.core.hang.records import PauseDecision
from trainprobe.sidecar.core.hang.state import HangState
from trainprobe.sidecar.core.judge.culprit import RankSummary
from trainprobe.sidecar.core.judge.decision import Judgement
from trainprobe.sidecar.core.judge.evidence import (
    ProcSample,
    RankEvidence,
    assess,
    stale_after_s,
)
from trainprobe.sidecar.core.judge.summary import previous_attempt, session_times
from trainprobe.sidecar.core.session.model import WorkerState, heard_every_ms

__all__ = [
    "REMOTE_WORD_MARGIN_S",
    "every_rank",
    "judge_pause",
    "pause_check",
    "paused_line",
    "paused_reason",
    "remote_evidence",
    "unsampled_evidence",
]

#: How long past its heartbeat limit a silent rank of another sidecar is
#: waited for when its word is not in yet: two job syncs at their default
#: interval (its sidecar's, then ours) and a read wait, with room to spare.
REMOTE_WORD_MARGIN_S = 2.0
#: Another sidecar's word, as the /proc state letter it reads as here.
_WORD = {"running": "R", "stopped": "T", "traced": "t", "frozen": "S"}


def paused_reason(
    evidence: Mapping[int, RankEvidence],
    summaries: Sequence[RankSummary],
    awaiting: Collection[int] = (),
) -> str:
    """Why the job is paused, not hung ("" when it is not): :func:`pause_check`'s reason."""
    return pause_check(evidence, summaries, awaiting)[0]


def pause_check(
    evidence: Mapping[int, RankEvidence],
    summaries: Sequence[RankSummary],
    awaiting: Collection[int] = (),
) -> tuple[str, list[int]]:
    """Why the job is paused ("" when it is not), and the ranks whose word a
    pause waits for ([] unless every other live rank is held).

    A scheduler's suspend (Slurm's ``scontrol suspend``), an operator's
    ``kill -STOP`` of every rank, or a cgroup freezer holds *every* rank at
    once: nobody waits for anybody, and the job goes on when it is resumed.
    Paused means every live rank sampled is held, each on the kernel's word
    (stopped, stopped by a tracer, or frozen: :attr:`RankEvidence.held`; for
    a relayed rank, the kernel of the node that verified it, as that node's
    stream said: :mod:`~trainprobe.sidecar.core.hang.held`), and no other live rank
    of the job reports (a held process's reporter thread is held too, so a
    rank that reports runs).

    A sampled live rank with no word at all runs: a local rank /proc shows
    running, an unverified one (nobody's kernel speaks for it), and a relayed
    one whose node had its time to speak and said nothing (it saw the rank
    run: a silent hang holding the GIL). Only a relayed rank whose node's word
    may still be on its way (``awaiting``: :func:`~.held.awaiting_word`) is
    waited for. So a held rank, made up by a token holder's own Relay stream
    or honestly under a debugger, never makes a silent hang elsewhere a pause.

    A held rank whose peers run and wait for it is no pause: that is a hang,
    and the stopped rank its definitive culprit (:func:`definitive_reason`).
    Ranks that are over (zombie, gone, ended streams) do not count either way.
    """
    over = {s.rank for s in summaries if s.ended}
    held: list[int] = []
    pending: list[int] = []
    for rank, ev in sorted(evidence.items()):
        if ev.state in ("zombie", "gone", "exiting") or (rank in over and not ev.state):
            continue
        if ev.held:
            held.append(rank)
        elif ev.state or rank not in awaiting:
            return "", []  # a live rank the kernel shows running, or no one says is held
        else:
            pending.append(rank)
    if not held:
        return "", []
    if any(s.reporting and not s.ended and s.rank not in held for s in summaries):
        return "", []
    if pending:
        return "", pending
    how = sorted({_HELD_HOW[held_kind(evidence[r])] for r in held})
    why = f"every live rank is held ({', '.join(how)}: ranks {held}): the job is paused, not hung"
    return why, []


def unsampled_evidence(
    rest: Iterable[WorkerState], kernel: Mapping[int, RankEvidence], now: float
) -> dict[int, RankEvidence]:
    """The job's live ranks an evidence round did not sample (``rest``), each
    as the kernel says, so that :func:`pause_check` judges every rank of the
    job, not only the 8 a round samples: a relayed rank by its node's word
    (:func:`~.held.relayed_evidence`), a local one by the engine's ``/proc``
    read of it (``kernel``: :attr:`~.effects.EvidenceRound.kernel`), and any
    other (an unverified session, a local rank not read) with no word at all,
    so it runs. Held ranks past the sample still make a whole-job pause."""
    out = {
        w.hello.rank: assess(
            w.hello.rank, [], [], now - w.last_report_at <= stale_after_s(heard_every_ms(w))
        )
        for w in rest
        if w.connected and not w.ended
    }
    out.update(relayed_evidence(rest, now))
    out.update((r, ev) for r, ev in kernel.items() if r in out)
    return out


def every_rank(
    rnd: EvidenceRound,
    workers: Sequence[WorkerState],
    ranks: Sequence[RankSummary],
    now: float,
    wait_s: float,
) -> tuple[dict[int, RankEvidence], list[int]]:
    """The kernel's word on every rank of ``rnd``'s job, and the ranks whose word
    may still be on its way: the round's sampled ranks (at most 8), the local
    ones past them (:func:`unsampled_evidence`), the relayed ones (their node's
    word) and another sidecar's (:func:`remote_evidence`, from the job's
    summaries ``ranks``). A session of an earlier attempt is marked ``superseded``:
    the kernel's word on it proves nothing against the job's current ranks."""
    job = [w for w in workers if w.hello.job_id == rnd.episode.job_id]
    rest = [w for w in job if w.hello.rank not in rnd.evidence]
    sampled = {w.hello.rank for w in rnd.states}
    beyond = [w for w in rest if w.hello.rank not in sampled]
    mine = {w.hello.rank for w in job}
    seen, remote = remote_evidence([s for s in ranks if s.rank not in mine], now, wait_s)
    seen.update({**unsampled_evidence(beyond, rnd.kernel, now), **relayed_evidence(rest, now)})
    seen.update(rnd.evidence)
    old = previous_attempt(session_times(job))
    for rank in old & seen.keys():
        seen[rank] = replace(seen[rank], superseded=True)
    return seen, sorted({*awaiting_word([*rnd.states, *rest], now), *remote})


def remote_evidence(
    remote: Iterable[RankSummary], now: float, wait_s: float
) -> tuple[dict[int, RankEvidence], list[int]]:
    """Another sidecar's ranks (Ray's per-node sidecars) as the kernel of
    their node says (:attr:`RankSummary.kernel`: read by the sidecar that
    serves the rank once it was silent, sent through the job's coordinator),
    and the silent ones whose word may still be on its way (silent at most
    ``wait_s``). Past that, a silent rank with no word runs, as a relayed one
    does: a held rank here never makes a silent hang on another node a
    pause, and a pause needs every rank of the job held on a kernel's word."""
    evidence: dict[int, RankEvidence] = {}
    awaiting: list[int] = []
    for s in remote:
        if s.ended:
            continue
        word = s.kernel if s.kernel in _WORD and s.kernel_age_s <= wait_s else ""
        at = now - s.kernel_age_s
        samples = [ProcSample(at, _WORD[word], frozen=word == "frozen")] if word else []
        evidence[s.rank] = assess(s.rank, samples, [], s.reporting)
        if not word and not s.reporting and s.report_age_s <= wait_s:
            awaiting.append(s.rank)
    return evidence, sorted(awaiting)


_HELD_HOW = {
    "frozen": "frozen by a cgroup freezer",
    "stopped": "stopped by SIGSTOP",
    "traced": "stopped by a tracer",
}


def paused_line(reason: str, paused_s: float) -> str:
    """``PAUSED 12 s — every live rank is held (...)`` for ``trainprobe status``."""
    return f"PAUSED {paused_s:.0f} s — {reason}; nothing is killed until it resumes"


def judge_pause(
    state: HangState,
    ep: Episode,
    incident_id: str,
    evidence: Mapping[int, RankEvidence],
    reason: str,
    now: float,
    out: list[Effect],
) -> Judgement | None:
    """A paused job's judgement this round (None: not paused, judge it as usual).

    While paused: no kill, and no clock runs. Once it runs again (``reason``
    empty after a pause) the episode is marked resumed (it closes at the next
    tick) and the job's clocks restart at the resume (:class:`ResumeJob`), so
    the time held never counts as a stall, here or by the rules.
    """
    if not reason and ep.paused_at is None:
        return None
    patience_s, basis = state.patience.patience_s(ep.job_id)
    record: dict[str, object] = {str(r): ev.to_record() for r, ev in sorted(evidence.items())}
    if not reason:  # it was paused and runs again
        ep.resumed_at = now
        out.append(ResumeJob(ep.job_id, now))
        held_s = now - (ep.paused_at or now)
        why = f"resumed after {held_s:.1f}s paused: nothing was killed"
        out.append(Log.warning("job %s: %s", ep.job_id, why))
        return Judgement(False, "resumed", why, False, patience_s, basis, now, now, record)
    if ep.paused_at is None:
        ep.paused_at = now
        out.append(
            Log.warning(
                "job %s (incident %s): %s; nothing is killed", ep.job_id, incident_id, reason
            )
        )
        out.append(Record(PauseDecision(incident_id, ep.job_id, reason, record)))
    why = f"{reason}: nothing is killed, and no stall clock runs until it resumes"
    j = Judgement(False, "paused", why, False, patience_s, basis, ep.paused_at, now, record)
    ep.decision = j.to_record()
    ep.suspect = paused_line(reason, now - ep.paused_at)
    return j
