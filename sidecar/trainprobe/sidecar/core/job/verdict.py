"""The job's verdict, judged where every rank's summary is: at its coordinator.

While a rank is suspect or an episode is open, every sidecar of a job needs
the cross-node analysis (which rank the others wait for, who waits, which
replicas). Sending each of them every other rank makes what a sidecar
receives grow with the nodes. So a large job's coordinator runs the analysis
itself, on the summaries it holds (:func:`judge_job`, at most every
ANALYZE_EVERY_S and only when they changed), and answers each sidecar with a
:class:`JobVerdict` of bounded size plus a bounded set of whole summaries
(:func:`exemplars`): the culprits, one rank of each kind of state (so a
pause, a silent rank whose word is on its way or a reporting rank is still
seen), the ranks of the replicas involved, and a few waiting ranks. Ranks of
the asking sidecar it names in full: those are the ones it acts on.

A job whose other ranks fit in MAX_SENT is answered as before (all of them,
or the changes since a version) and analysed by each sidecar itself.

Pure: summaries in, plain values out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from trainprobe.sidecar.core.judge.culprit import (
    HEALTHY,
    MISMATCH,
    Diagnosis,
    RankSummary,
    analyze,
)
from trainprobe.sidecar.core.judge.diagnosis import GroupProgress
from trainprobe.sidecar.core.judge.replicas import apply_replicas, replica_evidence

__all__ = [
    "ANALYZED_RANKS_PER_S",
    "ANALYZE_EVERY_S",
    "MAX_NAMED",
    "MAX_SENT",
    "MAX_TEXT",
    "SETTLED_EVERY_S",
    "JobAnalysis",
    "JobVerdict",
    "aged",
    "analyse_every_s",
    "exemplars",
    "healthy_diagnosis",
    "judge_job",
    "too_large_to_send",
]

#: A job whose other ranks are at most this many is sent whole; past it a
#: sidecar gets the verdict and at most this many summaries.
MAX_SENT = 64
#: Most ranks a verdict names in each list (culprits, waiting, a replica's
#: ranks), besides the asking sidecar's own; the counts are always exact.
MAX_NAMED = 32
#: Longest summary text a verdict carries.
MAX_TEXT = 2000
#: The coordinator analyses a changed job at most this often. A verdict needs
#: 3 s without progress: a second's lag still names the culprit within 5 s.
ANALYZE_EVERY_S = 1.0
#: Ranks an analysis pass reads in about a second of one core, with their aging
#: (the 16-core machine: 50,000 ranks in about 0.4 s). A larger job is analysed
#: at most every ranks / this seconds, so that its analyses take at most about
#: half of the upstream's core during an incident (100,000 ranks: every 2 s,
#: which still names a culprit within 5 s).
ANALYZED_RANKS_PER_S = 50_000
#: A job whose ranks did not change since an analysis that names a culprit
#: (or finds it healthy) is analysed again only this often: at 100,000 ranks
#: a pass costs about half a second of the upstream's one core.
SETTLED_EVERY_S = 5.0
#: Waiting ranks sent whole, as examples of what the others see.
_WAITING_SAMPLE = 8

#: Verdicts that make a job worth diagnosing.
_TROUBLE = frozenset({"HUNG", "UNRESPONSIVE"})


def too_large_to_send(ranks: int, own: int) -> bool:
    """Whether a job of ``ranks`` ranks, ``own`` of them a sidecar's, is too large
    to send that sidecar whole: a bounded ask of it gets the coordinator's verdict."""
    return ranks - own > MAX_SENT


def analyse_every_s(ranks: int) -> float:
    """How often a job of ``ranks`` ranks is analysed at most (ANALYZED_RANKS_PER_S)."""
    return max(ANALYZE_EVERY_S, ranks / ANALYZED_RANKS_PER_S)


def aged(s: RankSummary, dt_s: float, heartbeat_limit_s: float) -> RankSummary:
    """``s`` as it stands ``dt_s`` seconds after it was taken.

    Every age grows by ``dt_s``; a rank not heard of for longer than the
    heartbeat limit no longer counts as reporting (its sidecar may be gone).
    """
    if dt_s <= 0:
        return s
    groups = tuple(
        g if g.inflight_age_s is None else _with(g, inflight_age_s=g.inflight_age_s + dt_s)
        for g in s.groups
    )
    report_age = s.report_age_s + dt_s
    return _with(
        s,
        report_age_s=round(report_age, 3),
        step_age_s=round(s.step_age_s + dt_s, 3) if s.has_step else s.step_age_s,
        groups=groups,
        reporting=s.reporting and report_age <= heartbeat_limit_s,
        kernel_age_s=round(s.kernel_age_s + dt_s, 3) if s.kernel else 0.0,
    )


_T = TypeVar("_T", RankSummary, GroupProgress)


def _with(obj: _T, **changes: object) -> _T:
    """``dataclasses.replace`` for these frozen dataclasses without a check or
    ``__init__`` call: an analysis of a 100,000-rank job ages every summary it
    holds, and ``replace`` made that 1.4 s of a pass (8 times this)."""
    new = object.__new__(type(obj))
    fields = obj.__dict__.copy()
    fields.update(changes)
    object.__setattr__(new, "__dict__", fields)
    return new


def healthy_diagnosis(ranks: Sequence[RankSummary]) -> Diagnosis | None:
    """A HEALTHY diagnosis when every rank reports and none is hung or
    unresponsive, else None: the instantaneous picture of a running job (some
    ranks in an allreduce, others still computing) must not read as a straggler."""
    live = [r for r in ranks if r.ended != "goodbye"]
    world = max((r.world_size for r in ranks), default=0)
    troubled = any(r.verdict in _TROUBLE or not r.reporting or r.ended for r in live)
    if not live or troubled or len({r.rank for r in ranks}) < world:
        return None
    steps = [r.step for r in live if r.has_step]
    at = f"steps {min(steps)}..{max(steps)}" if steps else "no step yet"
    return Diagnosis(
        HEALTHY, summary=f"no rank is hung or unresponsive ({len(live)} ranks reporting, {at})"
    )


@dataclass(frozen=True)
class JobVerdict:
    """The coordinator's analysis of the whole job, bounded for one sidecar.

    ``culprits`` and ``waiting`` name the asking sidecar's ranks in full and
    at most MAX_NAMED others; ``culprit_count`` and ``waiting_count`` count
    them all. ``healthy``: the job's health gate passed (:func:`healthy_diagnosis`).
    """

    version: int
    kind: str
    healthy: bool = False
    culprits: tuple[int, ...] = ()
    waiting: tuple[int, ...] = ()
    culprit_count: int = 0
    waiting_count: int = 0
    confidence: float = 0.0
    summary: str = ""
    evidence: dict[str, object] = field(default_factory=dict)
    ranks: int = 0

    def diagnosis(self, gated: bool = True) -> Diagnosis:
        """The verdict as a diagnosis; with ``gated``, a healthy job's is HEALTHY."""
        if gated and self.healthy:
            return Diagnosis(HEALTHY, summary=self.summary)
        # Lists cut to the names here: the record says how many there were.
        counts = {
            key: n
            for key, n, named in (
                ("culprit_count", self.culprit_count, self.culprits),
                ("waiting_count", self.waiting_count, self.waiting),
            )
            if n > len(named)
        }
        evidence = {**self.evidence, **counts}
        return Diagnosis(
            self.kind, self.culprits, self.waiting, self.confidence, self.summary, evidence
        )


@dataclass(frozen=True)
class JobAnalysis:
    """The coordinator's cached analysis of every rank it holds."""

    version: int
    at: float
    diagnosis: Diagnosis
    healthy: Diagnosis | None
    #: Ranks sent whole to every sidecar (less its own), in priority order.
    exemplars: tuple[int, ...]
    ranks: int
    culprit_set: frozenset[int] = frozenset()
    waiting_set: frozenset[int] = frozenset()
    #: Missing ranks counted but not in the culprits (a claimed world's rest).
    unlisted: int = 0
    #: The verdict that names none of the asker's ranks beyond the first
    #: MAX_NAMED, and the ranks it names: built once, not at every sync.
    _common: list[tuple[JobVerdict, frozenset[int]]] = field(
        default_factory=list, compare=False, repr=False
    )

    def verdict_for(self, mine: Collection[int]) -> JobVerdict:
        """The verdict bounded for the sidecar that owns ``mine``."""
        if "replicas" in self.diagnosis.evidence or self.healthy is not None:
            return self._verdict(mine)  # the asker's replica is named too
        if not self._common:
            v = self._verdict(())
            self._common.append((v, frozenset((*v.culprits, *v.waiting))))
        common, named = self._common[0]
        culprits = [r for r in mine if r in self.culprit_set and r not in named]
        waiting = [r for r in mine if r in self.waiting_set and r not in named]
        if not culprits and not waiting:
            return common
        return replace(
            common,
            culprits=tuple(sorted({*common.culprits, *culprits})),
            waiting=tuple(sorted({*common.waiting, *waiting})),
        )

    def pushed(self, mine: Collection[int]) -> JobVerdict:
        """The verdict pushed to the node that owns ``mine``: :meth:`verdict_for`,
        naming its own ranks in full only where a node acts on them: its
        culprits; in a mismatch its waiting ranks too (a tie ends them); in a
        replicated job its replica (its waiting replica is spared). Its other
        waiting ranks it sees waiting in its own evidence. So every other node
        of a large job gets the one common verdict, encoded once, however many
        of its ranks wait (all of them, in a hang)."""
        d = self.diagnosis
        if d.kind != MISMATCH and "replicas" not in d.evidence:
            mine = [r for r in mine if r in self.culprit_set]
        return self.verdict_for(mine)

    def settled(self) -> bool:
        """Whether more time alone cannot make this analysis name more: it
        names a culprit, or finds the job healthy."""
        return bool(self.diagnosis.culprits) or self.healthy is not None

    def _verdict(self, mine: Collection[int]) -> JobVerdict:
        d = self.diagnosis
        if self.healthy is not None:
            return JobVerdict(self.version, d.kind, True, summary=self.healthy.summary)
        return JobVerdict(
            self.version,
            d.kind,
            False,
            _named(d.culprits, self.culprit_set, mine),
            _named(d.waiting, self.waiting_set, mine),
            len(d.culprits) + self.unlisted,
            len(d.waiting),
            d.confidence,
            d.summary if len(d.summary) <= MAX_TEXT else d.summary[: MAX_TEXT - 1] + "…",
            _bounded_evidence(d.evidence, mine),
            self.ranks,
        )


def judge_job(held: Iterable[RankSummary], version: int, now: float) -> JobAnalysis:
    """Analyse every rank of a job (ungated, replicas applied, as a follower
    does), with its health gate and the ranks to send whole."""
    ranks = sorted(held, key=lambda s: s.rank)
    # The missing ranks past those a verdict names are counted: one node may
    # claim a world of 2**20, and listing them cost 0.3 s and 80 MB an analysis.
    diag = apply_replicas(ranks, analyze(ranks, listed=MAX_NAMED))
    listed = diag.evidence.get("missing")
    count = diag.evidence.get("missing_count")
    unlisted = count - len(listed) if isinstance(count, int) and isinstance(listed, list) else 0
    return JobAnalysis(
        version,
        now,
        diag,
        healthy_diagnosis(ranks),
        exemplars(ranks, diag),
        len(ranks),
        frozenset(diag.culprits),
        frozenset(diag.waiting),
        unlisted=unlisted,
    )


def exemplars(ranks: Sequence[RankSummary], diag: Diagnosis) -> tuple[int, ...]:
    """The ranks a sidecar gets whole (at most MAX_SENT): whatever the analysis
    names, and one rank of each kind of state, so that a sidecar's own checks on
    the job's ranks (a pause needs every live rank held, a word still on its way
    waits) read on the sample as they would on every rank."""
    out: dict[int, None] = dict.fromkeys(diag.culprits[:MAX_NAMED])
    # Per kind, the least and the most recently heard of: a check on how long
    # ago the others reported ("any silent since the read?", "a word that may
    # still come?") reads the same on the two as on all.
    kinds: dict[tuple[object, ...], tuple[RankSummary, RankSummary]] = {}
    for s in ranks:
        key = (
            s.reporting,
            s.ended,
            s.kernel,
            s.in_flight,
            s.verdict,
            bool(s.ft_wait),
            bool(s.phases),
        )
        lo_hi = kinds.get(key)
        if lo_hi is None:
            kinds[key] = (s, s)
        elif s.report_age_s < lo_hi[0].report_age_s:
            kinds[key] = (s, lo_hi[1])
        elif s.report_age_s > lo_hi[1].report_age_s:
            kinds[key] = (lo_hi[0], s)
    out.update(dict.fromkeys(sorted({s.rank for pair in kinds.values() for s in pair})))
    rep = replica_evidence(diag.evidence)
    if rep is not None:
        out.update(dict.fromkeys(rep.ranks_of(rep.culprits)[:MAX_NAMED]))
        out.update(
            dict.fromkeys(rep.groups[w][0] for w in rep.waiting[:MAX_NAMED] if rep.groups.get(w))
        )
    out.update(dict.fromkeys(diag.waiting[:_WAITING_SAMPLE]))
    return tuple(out)[:MAX_SENT]


def _named(ranks: Sequence[int], among: Collection[int], mine: Collection[int]) -> tuple[int, ...]:
    """The first MAX_NAMED of ``ranks`` (all of them: ``among``) and every one of ``mine``."""
    if len(ranks) <= MAX_NAMED:
        return tuple(ranks)
    return tuple(sorted({*ranks[:MAX_NAMED], *(r for r in mine if r in among)}))


def _bounded_evidence(evidence: dict[str, object], mine: Collection[int]) -> dict[str, object]:
    """The diagnosis's evidence with every list cut to MAX_NAMED, and the
    replicas to those involved: the culprit replicas, the asker's, and the
    first MAX_NAMED others."""
    out: dict[str, object] = {}
    for key, value in evidence.items():
        if isinstance(value, (list, tuple)) and len(value) > MAX_NAMED:
            out[key] = list(value[:MAX_NAMED])
            out[f"{key}_count"] = len(value)
        elif key != "replicas":
            out[key] = value
    rep = replica_evidence(evidence)
    if rep is not None:
        own = set(mine)
        keep = [
            name
            for i, (name, ranks) in enumerate(sorted(rep.groups.items()))
            if i < MAX_NAMED or name in rep.culprits or own.intersection(ranks)
        ]
        groups = {name: list(rep.groups[name][: MAX_NAMED * 8]) for name in keep}
        out["replicas"] = {
            "groups": groups,
            "culprits": list(rep.culprits[:MAX_NAMED]),
            "waiting": [w for w in rep.waiting if w in groups],
            "count": len(rep.groups),
        }
    return out
