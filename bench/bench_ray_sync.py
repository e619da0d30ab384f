"""What the Ray job sync costs each sidecar, by the number of nodes: before and after.

    python bench/bench_ray_sync.py [--nodes 10,100,1000,12500] [--ranks-per-node 8]
        [--sampled 3] [--json bench/results/ray_sync.json]

Every sidecar of a job syncs with the job's coordinator actor every 500 ms.
Before, each sync answered every other sidecar's ranks. Now it answers a
digest of bounded size while the job is healthy; while a sidecar needs the
others' ranks (a suspect rank, an episode), the changes since the version it
holds if the others' ranks fit in 64, else the coordinator's own verdict on
the whole job and at most 64 summaries it names. This runs the code the actor
and the sidecars run, in one process and on a simulated clock: the
coordinator's :class:`~trainprobe.sidecar.core.job.view.CoordinatorState` (the
actor's ``sync`` is a call of it) and, for the sampled sidecars, their
:class:`~trainprobe.sidecar.core.job.view.JobView`, which says what to ask.
Ray pickles the arguments and the reply; their pickled sizes are what each
sidecar sends and receives.

A job of ``--nodes`` sidecars, ``--ranks-per-node`` ranks each, trains
healthily (two steps a second, a report a second, collectives briefly in
flight) for 12 s (measured from 11 s on), then one rank of node 0 stops
inside a step and every other rank waits for it in an allreduce; at 3 s they
are HUNG, and node 0's sidecar opens an episode. The incident is followed for
8 s, during which every sidecar asks for the job (bounded), as it would with
a suspect anywhere. The replies of ``--sampled`` sidecars (the last nodes:
none serves the culprit) are measured, as are the old protocol's (every other
rank, every sync) for the same state, and one more sidecar's that asks as
before this protocol (all, then the changes: *deltas*).

Printed, and written to ``--json``: per sidecar and sync, the bytes and
summaries received (steady state; the incident's first sync, its mean and
its largest), the bytes sent, the coordinator's CPU per sync (thread time of
``sync``: steady state, and during the incident with the job's analyses,
at most one a second, included), what that makes in cores at two syncs a
second per node, one analysis of every rank, the culprits the sidecars'
verdict names, and how long after the onset the last sampled sidecar's
analysis named the culprit.
"""

from __future__ import annotations

import argparse
import pickle
import random
import statistics
import time
from typing import Any

from harness.common import add_repo_to_path, write_result

add_repo_to_path()

from trainprobe.sidecar.core.job.digest import refresh_s  # noqa: E402
from trainprobe.sidecar.core.job.view import (  # noqa: E402
    CoordinatorState,
    EpisodeNote,
    JobView,
    SyncReply,
    analyze_job,
    merge_summaries,
)
from trainprobe.sidecar.core.judge.culprit import HEALTHY, GroupProgress, RankSummary  # noqa: E402

INTERVAL_S = 0.5
STEADY_S = 12.0
#: Measured from here: in the job's first round ranks are missing (not every
#: sidecar synced yet), so every sidecar fetches the details, for 10 s more.
MEASURED_FROM_S = 11.0
INCIDENT_S = 8.0
#: The old protocol's reply is measured this many times a phase (its size is
#: every other rank's: it varies little).
BEFORE_SAMPLES = 2
#: Verdicts come 3 s into the hang (the shipped sync_timeout_s and stall floor).
VERDICT_S = 3.0
REFRESH = refresh_s(10.0)  # the shipped heartbeat_timeout_s
CULPRIT = 3


class Job:
    """A simulated job's ranks: their summaries as their sidecar would take them."""

    def __init__(self, nodes: int, per_node: int, seed: int = 1) -> None:
        self.nodes, self.per_node = nodes, per_node
        self.world = nodes * per_node
        self.rng = random.Random(seed)
        self.onset: float | None = None

    def summaries(self, n: int, t: float) -> list[RankSummary]:
        rng, out = self.rng, []
        for r in range(n * self.per_node, (n + 1) * self.per_node):
            report_age = round(rng.random(), 3)  # a report a second
            if self.onset is None or t < self.onset:
                step = int(t * 2)
                busy = rng.random() < 0.3
                g = GroupProgress(
                    "default",
                    issued=step * 4 + busy,
                    completed=step * 4,
                    inflight_age_s=round(rng.random() * 0.2, 3) if busy else None,
                    inflight_op="allreduce" if busy else "",
                    inflight_seq=step * 4 + 1 if busy else 0,
                )
                step_age, verdict = round(rng.random() * 0.5, 3), "OK"
            else:
                hung = t - self.onset
                step = int(self.onset * 2)
                waits = r != CULPRIT
                g = GroupProgress(
                    "default",
                    issued=step * 4 + waits,
                    completed=step * 4,
                    inflight_age_s=round(hung, 3) if waits else None,
                    inflight_op="allreduce" if waits else "",
                    inflight_seq=step * 4 + 1 if waits else 0,
                )
                step_age = round(hung, 3)
                verdict = "HUNG" if waits and hung >= VERDICT_S else "OK"
            out.append(
                RankSummary(
                    rank=r,
                    world_size=self.world,
                    host=f"node-{n:05d}",
                    pid=10_000 + r,
                    node=f"{n:056x}",
                    report_age_s=report_age,
                    has_step=True,
                    step=step,
                    step_age_s=step_age,
                    groups=(g,),
                    verdict=verdict,
                    verified=True,
                    normal_step_s=2.0,
                )
            )
        return out


def run(nodes: int, per_node: int, sampled: int) -> dict[str, Any]:
    job = Job(nodes, per_node)
    state = CoordinatorState(instance="bench")
    views = {n: JobView() for n in range(max(0, nodes - sampled), nodes)}
    # One more sidecar asks as before this protocol (no ``bounded``): all, then deltas.
    delta_node = nodes - sampled - 1 if nodes > sampled else -1
    delta_view = JobView(bounded=False)
    keys = ("after", "after_n", "before", "before_n", "delta", "delta_n")
    steady: dict[str, list[float]] = {k: [] for k in keys}
    incident: dict[str, list[float]] = {k: [] for k in keys}
    sent: list[int] = []
    sync_cpu: list[float] = []
    incident_cpu: list[float] = []
    named_s: float | None = None  # when the last sampled sidecar's analysis names rank 3
    job.onset = STEADY_S
    t, rounds = 0.0, int((STEADY_S + INCIDENT_S) / INTERVAL_S)
    for i in range(rounds):
        t = i * INTERVAL_S
        hung = t - STEADY_S
        measured = t >= MEASURED_FROM_S
        into = incident if hung >= 0 else steady
        for n in range(nodes):
            now = t + n * INTERVAL_S / nodes  # the sidecars' syncs spread over the interval
            mine = job.summaries(n, t)
            note = None
            if n == 0 and hung >= VERDICT_S:
                note = EpisodeNote("ep-1", "job", "s0", "HUNG", "sync_inflight", "straggler", (3,))
            if n == delta_node:
                detail, since = delta_view.ask("job", mine, False, now)
                reply = state.sync(f"s{n}", mine, note, now, detail, since, REFRESH)
                delta_view.update("job", reply, now)
                if measured:
                    into["delta"].append(len(pickle.dumps(reply)))
                    into["delta_n"].append(len(reply.others))
                continue
            view = views.get(n)
            if view is None:
                # The others ask as every sidecar does while the job is in
                # trouble (from the onset: a suspect anywhere), bounded.
                t0 = time.thread_time()
                state.sync(f"s{n}", mine, note, now, hung >= 0, None, REFRESH, True)
                if measured:
                    (incident_cpu if hung >= 0 else sync_cpu).append(time.thread_time() - t0)
                continue
            detail, since = view.ask("job", mine, False, now)
            args = (f"s{n}", mine, note, detail, since, REFRESH, view.bounded)
            reply = state.sync(f"s{n}", mine, note, now, detail, since, REFRESH, view.bounded)
            view.update("job", reply, now)
            if n == nodes - 1 and hung >= 0 and named_s is None:
                ranks = merge_summaries(mine, view.remote("job", now, 10.0))
                diag = analyze_job(ranks, view.verdict("job"))
                if diag.kind != HEALTHY and diag.culprits == (CULPRIT,):
                    named_s = hung
            if not measured:
                continue
            sent.append(len(pickle.dumps(args)))
            into["after"].append(len(pickle.dumps(reply)))
            into["after_n"].append(len(reply.others))
            if n == nodes - 1 and len(into["before"]) < BEFORE_SAMPLES:
                # The old protocol, for the same state: every other rank.
                old = SyncReply(state.store.full(f"s{n}", now), state.episode)
                into["before"].append(len(pickle.dumps(old)))
                into["before_n"].append(len(old.others))
    # Named in the verdict the sidecars hold at the end (the culprit, rank 3).
    verdict = views[nodes - 1].verdict("job")
    state.analysis = None
    t0 = time.thread_time()
    state._analyse(t + 1.0, REFRESH)  # one more pass over every rank (a sync old), timed
    analysis_ms = (time.thread_time() - t0) * 1e3
    return {
        "nodes": nodes,
        "ranks": job.world,
        "sent_bytes": statistics.mean(sent),
        "coordinator_sync_us": statistics.median(sync_cpu) * 1e6 if sync_cpu else 0.0,
        # Every incident sync's CPU, the job's analyses (at most one a second) included.
        "coordinator_incident_sync_us": statistics.mean(incident_cpu) * 1e6
        if incident_cpu
        else 0.0,
        "coordinator_incident_core": (
            sum(incident_cpu) / INCIDENT_S * nodes / max(1, nodes - sampled - 1)
            if incident_cpu
            else 0.0
        ),
        "analyses": state.analyses,
        "analysis_ms": analysis_ms,
        # Seconds from the onset until that sidecar's analysis named the culprit
        # (the verdicts that make the job worth diagnosing come at 3 s).
        "culprit_named_s": named_s,
        "culprits": list(verdict.culprits) if verdict is not None else None,
        "steady": {
            "after_bytes": statistics.mean(steady["after"]),
            "after_summaries": statistics.mean(steady["after_n"]),
            "before_bytes": statistics.mean(steady["before"]),
            "before_summaries": statistics.mean(steady["before_n"]),
        },
        "incident": {
            "after_first_bytes": incident["after"][0],
            "after_mean_bytes": statistics.mean(incident["after"]),
            "after_max_bytes": max(incident["after"]),
            "after_mean_summaries": statistics.mean(incident["after_n"]),
            "before_bytes": statistics.mean(incident["before"]),
            "before_summaries": statistics.mean(incident["before_n"]),
            "delta_mean_bytes": statistics.mean(incident["delta"]) if incident["delta"] else 0.0,
            "delta_max_bytes": max(incident["delta"], default=0),
        },
    }


def kib(b: float) -> str:
    return f"{b / 1024:,.1f} KiB" if b < 1024 * 1024 else f"{b / 1024 / 1024:,.1f} MiB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", default="10,100,1000,12500")
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--sampled", type=int, default=3)
    p.add_argument("--json", default="")
    args = p.parse_args()
    started = time.monotonic()
    rows = []
    print(
        f"{'nodes':>6} {'ranks':>7} | steady: {'before':>10} {'after':>9} | incident: "
        f"{'before':>10} {'deltas':>10} {'after mean':>10} {'max':>10} | "
        f"{'sent':>8} {'coord/sync':>10} {'incident':>10} {'core':>6} {'analysis':>9} named at"
    )
    for nodes in (int(x) for x in args.nodes.split(",")):
        row = run(nodes, args.ranks_per_node, min(args.sampled, nodes))
        rows.append(row)
        s, i = row["steady"], row["incident"]
        print(
            f"{nodes:>6} {row['ranks']:>7} | {kib(s['before_bytes']):>18} "
            f"{kib(s['after_bytes']):>9} | {kib(i['before_bytes']):>20} "
            f"{kib(i['delta_mean_bytes']):>10} {kib(i['after_mean_bytes']):>10} "
            f"{kib(i['after_max_bytes']):>10} | {kib(row['sent_bytes']):>8} "
            f"{row['coordinator_sync_us']:>7.0f} µs {row['coordinator_incident_sync_us']:>7.0f} µs "
            f"{row['coordinator_incident_core']:>6.2f} {row['analysis_ms']:>6.0f} ms "
            f"{row['culprit_named_s']} s {row['culprits']}",
            flush=True,
        )
    if args.json:
        write_result(
            args.json,
            "ray_sync",
            {
                "interval_s": INTERVAL_S,
                "ranks_per_node": args.ranks_per_node,
                "sampled_sidecars": args.sampled,
                "rows": rows,
            },
            started,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
