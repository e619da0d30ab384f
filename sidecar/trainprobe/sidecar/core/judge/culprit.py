"""Live culprit analysis: which rank broke the job, from every rank's latest state.

When one rank hangs, its peers soon wait in the same collective, so a stall
rule sees the whole job hung. This module looks at all ranks together — their
per-process-group issued/completed collective sequence numbers, in-flight
collectives, steps and report ages — and names the rank(s) the others are
waiting for. The idea is the Flight Recorder analyser's (align sequence
numbers, find the first one some ranks never reached), applied live, and
without assuming any reference rank is healthy: a rank that is merely waiting
in flight at the frontier is never blamed.

Pure: plain dataclasses in, a :class:`Diagnosis` out. What goes in and what
comes out (``RankSummary``, ``Diagnosis`` and its kinds) is ``diagnosis.py``;
its names are importable from here too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import islice

from trainprobe.sidecar.core.conventions import INIT_PHASE, RENDEZVOUS_PHASE
from trainprobe.sidecar.core.judge.diagnosis import (
    ALL_IN_FLIGHT,
    HEALTHY,
    INCONCLUSIVE,
    MISMATCH,
    STRAGGLER,
    UNRESPONSIVE,
    Diagnosis,
    GroupProgress,
    RankSummary,
)
from trainprobe.sidecar.core.limits import MAX_WORLD_SIZE
from trainprobe.sidecar.core.text import TEXT_SENTENCES, sentences, short_list

__all__ = [
    "ALL_IN_FLIGHT",
    "HEALTHY",
    "INCONCLUSIVE",
    "MISMATCH",
    "STRAGGLER",
    "UNRESPONSIVE",
    "Diagnosis",
    "GroupProgress",
    "RankSummary",
    "analyze",
]


def _where(r: RankSummary) -> str:
    on = f" on {r.host}" if r.host else ""
    if r.node:
        on += f" (Ray node {r.node[:8]})" if r.host else f" on Ray node {r.node[:8]}"
    return f"rank {r.rank}{on}"


def analyze(ranks: Sequence[RankSummary], listed: int | None = None) -> Diagnosis:
    """Classify a job's trouble and name its culprits.

    Missing ranks (below the world size but never reported) count as
    unresponsive. Ranks that said Goodbye are finished and ignored. With
    ``listed``, only the first ``listed`` missing ranks are in the culprits
    and the evidence's "missing", and "missing_count" counts them all (the
    coordinator's analysis, where one node may claim a world of 2**20).
    """
    live = {r.rank: r for r in ranks if r.ended != "goodbye"}
    if not live:
        return Diagnosis(HEALTHY, summary="no live ranks")
    # Another sidecar's summary (the Ray job sync) may claim any world size: the
    # missing ranks are listed up to it, so at most what a Hello may claim.
    world = min(max(r.world_size for r in ranks), MAX_WORLD_SIZE)
    present = {r.rank for r in ranks}  # once: at the coordinator a job has 100,000 ranks
    absent = (rank for rank in range(world) if rank not in present)
    missing = list(absent if listed is None else islice(absent, listed))
    unlisted = 0 if listed is None else world - sum(r < world for r in present) - len(missing)
    silent = sorted([r.rank for r in live.values() if not r.reporting] + missing)
    waiting = tuple(sorted(r.rank for r in live.values() if r.reporting and r.in_flight))
    if silent:
        return _unresponsive(live, silent, missing, waiting, world, unlisted)
    diag = _by_startup(live)
    if diag is not None:
        return diag
    diag = _by_collectives(live, waiting)
    if diag is not None:
        return diag
    return _by_steps(live)


def _unresponsive(
    live: dict[int, RankSummary],
    silent: list[int],
    missing: list[int],
    waiting: tuple[int, ...],
    world: int,
    unlisted: int = 0,
) -> Diagnosis:
    parts = []
    for rank in silent[:TEXT_SENTENCES]:  # the text names these (a world may claim 2**20)
        r = live.get(rank)
        if r is None:
            parts.append(f"rank {rank} never reported")
        elif r.ended == "vanished":
            parts.append(f"{_where(r)} (pid {r.pid}) is gone: its stream broke")
        else:
            parts.append(f"{_where(r)} (pid {r.pid}) sent no report for {r.report_age_s:.1f}s")
    # If everyone is silent the fault may be ours or the network's, not a rank's.
    confidence = 0.4 if len(silent) + unlisted == world else (0.95 if waiting else 0.8)
    tail = f"; ranks {short_list(waiting)} wait for it in a collective" if waiting else ""
    return Diagnosis(
        UNRESPONSIVE,
        tuple(silent),
        waiting,
        confidence,
        sentences(parts, total=len(silent) + unlisted) + tail,
        {"missing": missing, "missing_count": len(missing) + unlisted} if unlisted else
        {"missing": missing},
    )  # fmt: skip


def _by_startup(live: dict[int, RankSummary]) -> Diagnosis | None:
    """Before the process group: those not yet in init_process_group hold up those in it.

    A verified rank is named late only when every rank of the job is verified:
    an unverified session's word that it waits in the rendezvous, or its mere
    presence as a rank of the world, makes no verified rank late.
    """
    arrived = tuple(sorted(r.rank for r in live.values() if RENDEZVOUS_PHASE in r.phases))
    if not arrived:
        return None
    trusted = all(r.verified for r in live.values())
    behind = sorted(
        (
            r
            for r in live.values()
            if INIT_PHASE in r.phases
            and RENDEZVOUS_PHASE not in r.phases
            and (trusted or not r.verified)
        ),
        key=lambda r: r.rank,
    )
    if behind:
        parts = [f"{_where(r)} (pid {r.pid}) has not reached init_process_group" for r in behind]
        return Diagnosis(
            STRAGGLER,
            tuple(r.rank for r in behind),
            arrived,
            0.9,
            sentences(parts) + f"; ranks {short_list(arrived)} wait for it in the rendezvous",
            {"phase": INIT_PHASE, "waiting_at": RENDEZVOUS_PHASE},
        )
    if len(arrived) == len(live):
        return Diagnosis(
            ALL_IN_FLIGHT,
            (),
            arrived,
            0.6,
            "every rank is inside init_process_group and none came out: the store or the "
            "backend's connection set-up is stuck, not one rank (under torchrun restarts, "
            "stale keys of the attempt before in the agent's store: docs/DEPLOY.md#torchrun)",
            {"phase": RENDEZVOUS_PHASE},
        )
    return None


def _frontier_key(g: GroupProgress) -> tuple[int, str]:
    return (g.inflight_seq, g.inflight_op)


def _by_collectives(live: dict[int, RankSummary], waiting: tuple[int, ...]) -> Diagnosis | None:
    if not waiting:
        return None
    groups = sorted(
        {g.group for r in live.values() for g in r.groups if g.inflight_age_s is not None}
    )
    for name in groups:
        # One lookup a rank: a job's coordinator runs this on 100,000 ranks.
        inflight: dict[int, GroupProgress | None] = {
            r.rank: g
            for r in live.values()
            if (g := r.group(name)) is not None and g.inflight_age_s is not None
        }
        # Where the verified ranks wait, when any does: an unverified session's
        # sequence numbers never outvote them, nor make a mismatch of them.
        voters = {r: g for r, g in inflight.items() if live[r].verified} or inflight
        keys = Counter(_frontier_key(g) for g in voters.values())  # type: ignore[arg-type]
        (seq, op), votes = keys.most_common(1)[0]
        behind = []
        for r in live.values():
            if r.rank in inflight:
                continue
            if r.phases:
                continue  # inside a declared phase: the rules judge it by its own deadline
            g = r.group(name)
            if g is None or g.issued < seq:
                behind.append(r)
        odd = [rank for rank, g in voters.items() if _frontier_key(g) != (seq, op)]  # type: ignore[arg-type]
        if len(keys) > 1 and (len(odd) < len(voters) - len(odd) or not behind):
            return _mismatch(live, name, voters, seq, op, odd, votes)
        if behind:
            return _straggler(name, seq, op, votes, behind, tuple(sorted(inflight)))
        if len(inflight) == len(live):
            ages = [g.inflight_age_s or 0.0 for g in inflight.values() if g is not None]
            return Diagnosis(
                ALL_IN_FLIGHT,
                (),
                tuple(sorted(inflight)),
                0.6,
                f"every rank waits in {op} #{seq} of group {name!r} (oldest for "
                f"{max(ages):.1f}s): the collective itself is stuck, which points to the "
                "network or the communication library rather than one rank",
                {"group": name, "seq": seq, "op": op},
            )
    return None


def _straggler(
    group: str, seq: int, op: str, votes: int, behind: list[RankSummary], waiting: tuple[int, ...]
) -> Diagnosis:
    parts = []
    for r in sorted(behind, key=lambda r: r.rank):
        g = r.group(group)
        where = f"is at {g.issued} of group {group!r}" if g is not None else f"never used {group!r}"
        stuck = "not in any collective" if not r.in_flight else "in an older collective"
        step = f", last step {r.step} {r.step_age_s:.1f}s ago" if r.has_step else ""
        parts.append(f"{_where(r)} never entered {op} #{seq} ({where}, {stuck}{step})")
    confidence = 0.95 if all(not r.in_flight for r in behind) else 0.8
    return Diagnosis(
        STRAGGLER,
        tuple(sorted(r.rank for r in behind)),
        waiting,
        confidence,
        sentences(parts) + f"; {votes} rank(s) wait for it in {op} #{seq}",
        {"group": group, "seq": seq, "op": op, "waiting_at": list(waiting)},
    )


def _mismatch(
    live: dict[int, RankSummary],
    group: str,
    inflight: dict[int, GroupProgress | None],
    seq: int,
    op: str,
    odd: list[int],
    votes: int,
) -> Diagnosis:
    detail = ", ".join(
        f"rank {rank}: {g.inflight_op} #{g.inflight_seq}"  # type: ignore[union-attr]
        for rank, g in sorted(inflight.items())
    )
    culprits = tuple(sorted(odd)) if len(odd) < votes else ()
    summary = f"ranks wait on different collectives of group {group!r} ({detail})"
    if culprits:
        summary += f"; rank(s) {list(culprits)} differ from the {votes} at {op} #{seq}"
    return Diagnosis(
        MISMATCH,
        culprits,
        tuple(sorted(inflight)),
        0.85 if culprits else 0.3,
        summary,
        {
            "group": group,
            "majority": {"seq": seq, "op": op},
            "odd": sorted(odd),
            # Every rank issued the same collective number as a different operation:
            # they can never match, whoever is wrong (decision.py ends a tie at once).
            "same_seq": len({g.inflight_seq for g in inflight.values() if g is not None}) == 1,
        },
    )


def _by_steps(live: dict[int, RankSummary]) -> Diagnosis:
    """No collective data: fall back to steps (an older step is behind)."""
    stepped = [r for r in live.values() if r.has_step]
    if not stepped:
        return Diagnosis(INCONCLUSIVE, summary="no rank has completed a step yet")
    top = max(r.step for r in ([r for r in stepped if r.verified] or stepped))
    behind = sorted(
        r.rank for r in live.values() if not r.phases and (not r.has_step or r.step < top)
    )
    if behind and len(behind) < len(live):
        return Diagnosis(
            STRAGGLER,
            tuple(behind),
            (),
            0.6,
            f"rank(s) {behind} are behind step {top} that the others completed "
            "(no collective sequence numbers: use hook.watch_ddp for a sharper diagnosis)",
            {"top_step": top},
        )
    if len(live) == 1 and (only := next(iter(live.values()))).world_size == 1:
        # Nothing to compare with: "no rank stands out" would send the user to
        # watch_ddp, which a single process does not have.
        summary = (
            f"rank {only.rank}, the job's only rank, stopped after step {top} "
            "with no collective in flight"
        )
    else:
        summary = (
            f"every rank stopped after step {top} and none reports a collective in flight: "
            "no rank stands out (use hook.watch_ddp so collectives can be compared)"
        )
    return Diagnosis(INCONCLUSIVE, (), (), 0.0, summary, {"top_step": top})
