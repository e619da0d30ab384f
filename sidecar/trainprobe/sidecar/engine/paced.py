"""The rules' findings judged as of the sidecar's own lateness while it is
behind its reports (:mod:`trainprobe.sidecar.core.session.pace`): its
lateness ages nobody, and what that defers is counted once a second.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from trainprobe.sidecar.core.judge.rules import RuleConfig, evaluate, evaluate_worker, job_contexts
from trainprobe.sidecar.core.session.model import Finding, WorkerKey, WorkerState
from trainprobe.sidecar.core.session.pace import BEHIND_S, Pace, defer

__all__ = ["PacedJudge"]

log = logging.getLogger("trainprobe.sidecar")


class PacedJudge:
    """The engine's rule pass, paced by the sidecar's own lateness."""

    def __init__(self, rules: RuleConfig, pace: Pace) -> None:
        self.rules = rules
        self.pace = pace
        self._behind = False
        self._count_deferred_at = 0.0

    def judge(
        self, workers: list[WorkerState], now: float, flagged: Collection[WorkerKey]
    ) -> list[Finding]:
        """The rules' findings, judged as of the sidecar's own lateness ago while it
        is behind (core/session/pace.py): its lateness ages nobody."""
        allowance = self.pace.allowance(now)
        behind = allowance >= BEHIND_S
        if behind != self._behind:
            self._behind = behind
            if behind:
                log.warning(
                    "sidecar is behind its own reports by %.1fs: verdicts that are ages "
                    "are judged that much later until it catches up",
                    allowance,
                )
            else:
                log.warning("sidecar caught up with its reports: verdicts judged at once")
                self.pace.note_deferred(())
        if not behind:
            return evaluate(workers, self.rules, now)
        judged = evaluate(workers, self.rules, now, allowance)
        standing = {w.key: w.verdict_rule for w in workers if w.key in flagged} if flagged else {}
        count = now >= self._count_deferred_at
        if count:  # judged at now in full once a second, to count what is deferred
            self._count_deferred_at = now + 1.0
            at_now = evaluate(workers, self.rules, now)
        elif flagged:  # otherwise only the workers whose verdict stands
            ctx = job_contexts(workers, self.rules.stall)
            at_now = [
                f
                for w in workers
                if w.key in flagged
                for f in evaluate_worker(w, self.rules, ctx[w.hello.job_id], now)
            ]
        else:
            return judged
        findings, deferred = defer(judged, at_now, standing)
        if count:
            self.pace.note_deferred(deferred)
        return findings
