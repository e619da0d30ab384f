"""A job's hang is one episode: diagnose once, act on the culprits, absorb the rest.

When one rank hangs, its peers stall too, in later ticks and under other
rules (the stall rule on one rank, ``sync_inflight`` on another, ``heartbeat``
on a third), and once a rank is killed its peers exit. Per-rank edge
triggering alone would make each of those a new incident and a new kill.
:class:`JobEpisodes` keeps one open episode per job from the first HUNG or
UNRESPONSIVE incident until every process it involved has exited, been
replaced or made progress again; in between, the job's further incidents
are recorded as updates of the episode (a peer's exit is an *expected*
update), never acted on twice.

:func:`plan_targets` picks whom the episode's action hits: the culprits
this sidecar serves when the diagnosis is conclusive, else the configured
fallback (kill every stalled rank, or observe). What an episode records is
``episode.py``; its names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from trainprobe.sidecar.core.hang.episode import (
    HANG_VERDICTS,
    INCONCLUSIVE_CHOICES,
    CulpritPolicy,
    Episode,
    Routing,
)
from trainprobe.sidecar.core.incident.actions import is_destructive
from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.judge.culprit import MISMATCH, Diagnosis
from trainprobe.sidecar.core.judge.replicas import replica_evidence
from trainprobe.sidecar.core.session.model import Verdict, WorkerState

__all__ = [
    "HANG_VERDICTS",
    "INCONCLUSIVE_CHOICES",
    "CulpritPolicy",
    "Episode",
    "JobEpisodes",
    "Routing",
    "late_stalled",
    "plan_targets",
]

#: What an open episode absorbs: further hangs, and exits (what its action leads to).
_FOLDED = HANG_VERDICTS | {Verdict.DEAD}


def plan_targets(
    diagnosis: Diagnosis,
    served: Iterable[int],
    stalled: Iterable[int],
    policy: CulpritPolicy,
) -> tuple[list[int], str]:
    """The ranks this sidecar's action hits, and why.

    ``served``: ranks of the job this sidecar can act on; ``stalled``: those
    of them that the rules find hung or unresponsive now.
    """
    served = set(served)
    rep = replica_evidence(diagnosis.evidence)
    # Ranks of replicas that only wait for another: never a target, whatever else says.
    spared = rep.waiting_ranks if rep is not None else frozenset()
    if rep is not None and rep.culprits:
        group = rep.ranks_of(rep.culprits)
        mine = [r for r in group if r in served and r not in spared]
        why = (
            f"culprit replica(s) {list(rep.culprits)} (ranks {group}): the group is evicted "
            f"whole; replicas {list(rep.waiting)} wait for it and go on"
        )
        others = [r for r in group if r not in served]
        if others:
            why += f"; rank(s) {others} are served by another sidecar, which acts on them"
        return mine, why
    if diagnosis.conclusive:
        culprits = list(diagnosis.culprits)
        mine = [r for r in culprits if r in served and r not in spared]
        why = (
            f"culprit rank(s) {culprits} ({diagnosis.kind}, confidence {diagnosis.confidence:.2f})"
        )
        missing = diagnosis.evidence.get("missing")
        absent = set(missing) if isinstance(missing, (list, tuple)) else set()
        others = [r for r in culprits if r not in served and r not in absent]
        if others:
            why += f"; rank(s) {others} are served by another sidecar, which acts on them"
        if unseen := [r for r in culprits if r in absent]:
            why += f"; rank(s) {unseen} have no session on any sidecar (not connected)"
        return mine, why
    fallback = policy.on_inconclusive
    why = f"diagnosis {diagnosis.kind}: no culprit named; on_inconclusive={fallback}"
    if fallback == "kill_stalled":
        ranks = set(stalled)
        if diagnosis.kind == MISMATCH and diagnosis.evidence.get("same_seq"):
            # A tie: every rank in it is as much a suspect as the one whose stall
            # crossed the threshold first (ended together, not one now and one later).
            ranks |= set(diagnosis.waiting)
        return sorted((ranks & served) - spared), why
    return [], why


def late_stalled(ep: Episode, incident: Incident, policy: CulpritPolicy) -> list[int]:
    """Ranks of a folded-in hang that an inconclusive episode must kill now.

    Without a named culprit, ``kill_stalled`` means every stalled rank, also
    those whose stall crossed the threshold a tick after the episode opened
    (their last steps ended a few ms apart): waiting for the grace sweep would
    leave, say, a rank asleep outside any collective running for seconds.
    """
    if ep.diagnosis.conclusive or policy.on_inconclusive != "kill_stalled":
        return []
    if not is_destructive(ep.action) or incident.verdict not in HANG_VERDICTS:
        return []
    rep = replica_evidence(ep.diagnosis.evidence)
    spared = rep.waiting_ranks if rep is not None else frozenset()
    return [r for r in incident.ranks if r not in spared]


def _resolved(
    state: WorkerState | None,
    pid: int,
    since: float,
    verdict: Callable[[WorkerState], Verdict] | None = None,
) -> bool:
    """Whether a process of an episode no longer holds it open (``verdict``: the
    session's verdict as of now, where newer than its own)."""
    if state is None or state.hello.pid != pid:
        return True  # forgotten, or replaced by a new process
    if state.ended or state.killed_by_us:
        return True
    progressed = state.has_step and state.last_step_at > since
    now_verdict = verdict(state) if verdict is not None else state.verdict
    return progressed and now_verdict not in HANG_VERDICTS


class JobEpisodes:
    """The open hang episodes of this sidecar's jobs (at most one per job)."""

    def __init__(self, policy: CulpritPolicy) -> None:
        self.policy = policy
        self._open: dict[str, Episode] = {}
        #: Coordinator episode ids already followed here (never followed twice).
        self._followed: set[str] = set()

    def __iter__(self) -> Iterator[Episode]:
        return iter(list(self._open.values()))

    def __len__(self) -> int:
        return len(self._open)

    def get(self, job_id: str) -> Episode | None:
        return self._open.get(job_id)

    def route(self, incidents: list[Incident]) -> Routing:
        """Sort a tick's incidents: the first hang of a job opens its episode."""
        out = Routing()
        opening: dict[str, str] = {}
        for inc in incidents:
            hang = inc.verdict in HANG_VERDICTS
            if hang and inc.job_id not in self._open and inc.job_id not in opening:
                opening[inc.job_id] = inc.id
                out.openers.append(inc)
        opener_ids = set(opening.values())
        for inc in incidents:
            if inc.id in opener_ids:
                continue
            ep = self._open.get(inc.job_id)
            episode_id = ep.id if ep is not None else opening.get(inc.job_id)
            if episode_id is None or inc.verdict not in _FOLDED:
                # A DEGRADED finding (slow syncs, GPU memory) is news of its own.
                out.plain.append(inc)
            else:
                # A rank of a hung job that exits is what the episode's action leads to.
                out.updates.append((episode_id, inc, inc.verdict == Verdict.DEAD))
                if ep is not None:
                    ep.updates += 1
        return out

    def open(
        self,
        job_id: str,
        episode_id: str,
        diagnosis: Diagnosis,
        pids: dict[int, int],
        action: str,
        now: float,
        incident: Incident | None = None,
        remote_id: str = "",
    ) -> Episode:
        """Open the job's episode; ``action`` is what the policy does for its verdict."""
        destructive = is_destructive(action)
        ep = Episode(
            id=episode_id,
            job_id=job_id,
            opened_at=now,
            pids=dict(pids),
            diagnosis=diagnosis,
            incident=incident,
            action=action,
            sweep_at=now + self.policy.job_kill_grace_s if destructive else None,
            remote_id=remote_id,
        )
        self._open[job_id] = ep
        if remote_id:
            self._followed.add(remote_id)
        return ep

    def arm_sweep(
        self, ep: Episode, action: str, now: float, grace_s: float | None = None, phase: str = ""
    ) -> None:
        """The episode acted: a destructive action sweeps the job's rest after the grace.

        ``grace_s`` shortens ``job_kill_grace_s`` (to 0 when the culprit is
        already gone: its peers can never finish their collective); ``phase``
        says why, for the sweep's record.
        """
        ep.acted = True
        ep.action = action
        if not is_destructive(action):
            return
        due = now + (self.policy.job_kill_grace_s if grace_s is None else grace_s)
        if ep.sweep_at is None or (grace_s is not None and due < ep.sweep_at and not ep.swept):
            ep.sweep_at = due
            if phase or grace_s == 0:
                ep.sweep_phase = phase or "peers_of_gone"

    def should_follow(self, remote_id: str, job_id: str) -> bool:
        """Whether a coordinator's episode is new to this sidecar."""
        return remote_id not in self._followed and job_id not in self._open

    def due_sweeps(self, now: float) -> list[Episode]:
        """Episodes whose grace is over and whose job was not swept yet."""
        out = []
        for ep in self._open.values():
            if ep.sweep_at is not None and not ep.swept and now >= ep.sweep_at:
                ep.swept = True
                out.append(ep)
        return out

    @staticmethod
    def remaining(
        ep: Episode,
        states: dict[int, WorkerState],
        verdict: Callable[[WorkerState], Verdict] | None = None,
    ) -> list[int]:
        """Ranks of ``ep`` whose process still holds the job (to sweep)."""
        return sorted(
            rank
            for rank, pid in ep.pids.items()
            if not _resolved(states.get(rank), pid, ep.opened_at, verdict)
        )

    def settle(
        self,
        states_by_job: dict[str, dict[int, WorkerState]],
        verdict: Callable[[WorkerState], Verdict] | None = None,
    ) -> list[Episode]:
        """Close the episodes whose processes all exited, were replaced or progressed,
        and those of jobs that resumed from a pause (nothing of a pause is a hang)."""
        closed = []
        for job_id, ep in list(self._open.items()):
            states = states_by_job.get(job_id, {})
            if ep.resumed_at is not None or not self.remaining(ep, states, verdict):
                del self._open[job_id]
                closed.append(ep)
        return closed
