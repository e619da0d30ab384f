"""A paused job in the watch: its judgement each round, and its end.

The decision is the core's (:func:`~trainprobe.sidecar.core.decision.paused_reason`:
every live rank held, stopped or frozen, and nobody else reporting). Here it is
carried out: a ``paused`` decision record once, ``PAUSED`` in status, no kill;
once the job runs again the episode closes, :meth:`Registry.resume_job` restarts
the job's clocks at the resume, and a ``resumed`` record says how long it was held.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from trainprobe.sidecar.act.incident_log import IncidentLog
from trainprobe.sidecar.core.decision import Judgement, paused_line
from trainprobe.sidecar.core.episodes import Episode
from trainprobe.sidecar.core.evidence import RankEvidence
from trainprobe.sidecar.core.patience import PatienceBook
from trainprobe.sidecar.core.registry import Registry

__all__ = ["close_paused", "judge_pause"]

log = logging.getLogger("trainprobe.sidecar")


def judge_pause(
    ep: Episode,
    incident_id: str,
    evidence: Mapping[int, RankEvidence],
    reason: str,
    now: float,
    patience: PatienceBook,
    registry: Registry,
    incident_log: IncidentLog,
) -> Judgement | None:
    """A paused job's judgement this round (None: not paused, judge it as usual).

    ``reason`` is :func:`paused_reason`'s. While paused: no kill, and no clock
    runs. Once it runs again (``reason`` empty after a pause) the episode is
    marked resumed (it closes at the next tick) and the registry restarts the
    job's clocks at the resume, so the time held never counts as a stall, here
    or by the rules.
    """
    if not reason and ep.paused_at is None:
        return None
    patience_s, basis = patience.patience_s(ep.job_id)
    record: dict[str, object] = {str(r): ev.to_record() for r, ev in sorted(evidence.items())}
    if not reason:  # it was paused and runs again
        ep.resumed_at = now
        registry.resume_job(ep.job_id, now)
        held_s = now - (ep.paused_at or now)
        why = f"resumed after {held_s:.1f}s paused: nothing was killed"
        log.warning("job %s: %s", ep.job_id, why)
        return Judgement(False, "resumed", why, False, patience_s, basis, now, now, record)
    if ep.paused_at is None:
        ep.paused_at = now
        log.warning("job %s (incident %s): %s; nothing is killed", ep.job_id, incident_id, reason)
        incident_log.write(
            {
                "type": "decision",
                "incident_id": incident_id,
                "job_id": ep.job_id,
                "act": False,
                "rule": "paused",
                "why": reason,
                "evidence": record,
            }
        )
    why = f"{reason}: nothing is killed, and no stall clock runs until it resumes"
    j = Judgement(False, "paused", why, False, patience_s, basis, ep.paused_at, now, record)
    ep.decision = j.to_record()
    ep.suspect = paused_line(reason, now - ep.paused_at)
    return j


def close_paused(ep: Episode, now: float, incident_log: IncidentLog) -> bool:
    """Log the end of a paused episode; False if ``ep`` was never paused.

    It may close before a round saw the ranks run (they stepped first): its
    pause then ends now.
    """
    if ep.paused_at is None:
        return False
    resumed_at = ep.resumed_at if ep.resumed_at is not None else now
    incident_log.write(
        {
            "type": "decision",
            "incident_id": ep.id,
            "job_id": ep.job_id,
            "act": False,
            "rule": "resumed",
            "why": "the job was paused (every live rank held) and resumed: nothing was killed; "
            "its clocks restart at the resume",
            "paused_s": round(resumed_at - ep.paused_at, 3),
        }
    )
    log.info("job %s: resumed after a pause of %.1fs", ep.job_id, resumed_at - ep.paused_at)
    return True
