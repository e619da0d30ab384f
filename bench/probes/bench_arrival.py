"""What the arrival-lag computation costs the sidecar, per report, without the network.

    python bench/probes/bench_arrival.py [--workers 1000] [--collectives 8] [--repeats 7]
        [--quick] [--json OUT]

``--workers`` simulated ranks of one job report rounds of the same collectives
(one group, ``--collectives`` new issue times per report: e.g. 2 steps of 4
DDP buckets; one rank enters each 20 ms late). Each round goes through the
sidecar's own code in this process, as in bench/bench_report_path.py:
``WorkerMessage.FromString``, ``pb.report_from_pb``, ``Registry.apply``. It is
timed twice per round, on identical reports except that one set carries the
issue times and the other does not, into two registries that swap every
round (2 x ``--repeats`` rounds); the difference is what arrival lag costs
(parsing and converting the times, validating them, matching and closing the
comparisons). Also timed: the tracker's per-tick sweep, and exporting the
lags (one SDK histogram record each, into a real OpenTelemetry pipeline that
a Prometheus reader reads). Times are this process's CPU time (the machine
may be shared); the minimum of ``--repeats`` is kept.

The share of the sidecar's CPU is the arrival cost per report over the whole
sidecar's CPU per report at the same N, as bench/bench_scale.py measures it
over real gRPC (``--sidecar-us-per-report``, from its reports per CPU-second).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path, write_result

add_repo_to_path()

from harness.loadgen import Sim  # noqa: E402

from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.core.session.registry import Registry  # noqa: E402
from trainprobe.sidecar.transport import pb as convert  # noqa: E402


def with_issue_times(
    msg: probe_pb2.WorkerMessage, first_seq: int, k: int, late_ns: int
) -> probe_pb2.WorkerMessage:
    rep = msg.report
    start = rep.mono_ns - 50_000_000
    rep.sync.count = k
    rep.sync.groups.append(
        probe_pb2.GroupSeq(
            group="default",
            issued=first_seq + k - 1,
            completed=first_seq + k - 1,
            started_seqs=range(first_seq, first_seq + k),
            started_mono_ns=[start + i * 5_000_000 + late_ns for i in range(k)],
        )
    )
    return msg


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=1000)
    p.add_argument("--collectives", type=int, default=8, help="new issue times per report")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument(
        "--sidecar-us-per-report",
        type=float,
        default=0.0,
        help="the whole sidecar's CPU per report at this N (bench_scale)",
    )
    p.add_argument("--quick", action="store_true", help="3 repeats")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.quick:
        args.repeats = min(args.repeats, 3)
    started = time.monotonic()
    n, k = args.workers, args.collectives
    # Two registries, and the variants swap them every round: where a registry
    # lies in memory alone moved its per-report time by ~5 µs (the one built
    # second was slower), more than what is measured here.
    regs = [Registry(), Registry()]
    sims = [Sim("load", r, n, 2, 1000) for r in range(n)]
    states: list[list] = [[], []]
    now = time.monotonic()
    for i, reg in enumerate(regs):
        for sim in sims:
            state = reg.open(convert.hello_from_pb(sim.hello), now)
            reg.apply(state, convert.report_from_pb(sim.report().report), now)
            states[i].append(state)
    best = {"with": 1e9, "without": 1e9, "sweep": 1e9, "export": 1e9}
    closed = 0
    # CPU time, not wall time: the machine is shared, and what matters is what
    # this work costs a core, not how long other processes delayed it.
    clock = time.process_time
    pipeline = otel_pipeline()
    seq = 1
    for rnd in range(2 * args.repeats):
        wire: dict[str, list[bytes]] = {"with": [], "without": []}
        where = {"with": rnd % 2, "without": 1 - rnd % 2}
        for r, sim in enumerate(sims):
            base = sim.report()
            plain = probe_pb2.WorkerMessage()
            plain.CopyFrom(base)
            plain.report.sync.count = k
            plain.report.sync.groups.append(
                probe_pb2.GroupSeq(group="default", issued=seq + k - 1, completed=seq + k - 1)
            )
            late = 20_000_000 if r == 7 else 0
            wire["with"].append(with_issue_times(base, seq, k, late).SerializeToString())
            wire["without"].append(plain.SerializeToString())
        seq += k
        for name in ("with", "without") if rnd % 4 < 2 else ("without", "with"):
            reg = regs[where[name]]
            t0 = clock()
            msgs = [probe_pb2.WorkerMessage.FromString(b) for b in wire[name]]
            reports = [convert.report_from_pb(m.report) for m in msgs]
            now = time.monotonic()
            for state, report in zip(states[where[name]], reports, strict=True):
                reg.apply(state, report, now)
            best[name] = min(best[name], (clock() - t0) / n * 1e6)
        reg = regs[where["with"]]
        t0 = clock()
        reg.arrivals.sweep(time.monotonic())
        best["sweep"] = min(best["sweep"], (clock() - t0) * 1e3)
        lags = reg.arrivals.lags
        closed = len(lags)
        t0 = clock()
        if pipeline is not None:
            from trainprobe.sidecar.otel.metrics.measures import (
                ARRIVAL_LAG,
                worker_metric_attributes,
            )

            while lags:
                w, group, lag_s, missed = lags.popleft()
                pipeline.record(
                    ARRIVAL_LAG,
                    lag_s,
                    {
                        **worker_metric_attributes(w.hello),
                        "trainprobe.collective.group": group,
                        "trainprobe.collective.missed": missed,
                    },
                )
        lags.clear()
        if closed:  # the first round closes no window yet
            best["export"] = min(best["export"], (clock() - t0) / n * 1e6)
    if pipeline is not None:
        pipeline.shutdown(1.0)
    arrival_us = best["with"] - best["without"]
    # At 10 ticks/s and 10 reports/s per worker, a tick's sweep is spread over N reports.
    sweep_us = best["sweep"] * 1e3 / n
    compute_us = arrival_us + sweep_us
    data = {
        "workers": n,
        "collectives_per_report": k,
        "repeats": args.repeats,
        "lags_per_round": closed,
        "report_us_without": best["without"],
        "report_us_with": best["with"],
        "arrival_us_per_report": arrival_us,
        "sweep_ms_per_tick": best["sweep"],
        "compute_us_per_report": compute_us,
        "export_us_per_report": best["export"],
        "sidecar_us_per_report": args.sidecar_us_per_report,
        "compute_share": compute_us / args.sidecar_us_per_report
        if args.sidecar_us_per_report
        else None,
        "with_export_share": (compute_us + best["export"]) / args.sidecar_us_per_report
        if args.sidecar_us_per_report
        else None,
    }
    print(
        f"N={n}, {k} issue times per report: report path {best['without']:.1f} -> "
        f"{best['with']:.1f} µs (+{arrival_us:.1f} µs), sweep {best['sweep']:.3f} ms/tick "
        f"(+{sweep_us:.2f} µs/report), export {best['export']:.1f} µs/report "
        f"({closed} lags per round)"
    )
    if args.sidecar_us_per_report:
        print(
            f"share of the sidecar's {args.sidecar_us_per_report:.1f} µs/report: computation "
            f"{data['compute_share']:.1%}, with the metric export {data['with_export_share']:.1%}"
        )
    if args.json:
        write_result(args.json, "arrival", data, started)
    return 0


def otel_pipeline():  # an OtelPipeline, or None without OpenTelemetry
    """A real pipeline whose metrics a Prometheus reader holds (port 0: any free one)."""
    try:
        from trainprobe.sidecar.config.settings import Settings
        from trainprobe.sidecar.otel.export.config import telemetry_config
        from trainprobe.sidecar.otel.export.pipeline import OtelPipeline
        from trainprobe.sidecar.otel.metrics.measures import GaugeSnapshot
    except ImportError:
        return None
    state = Path(tempfile.mkdtemp(prefix="tp-arr-"))
    settings = Settings(metrics_port=0, metrics_host="127.0.0.1", state_dir=state)
    cfg = telemetry_config(settings, {"OTEL_TRACES_EXPORTER": "none"})
    return OtelPipeline(cfg, {}, GaugeSnapshot, "bench")


if __name__ == "__main__":
    sys.exit(main())
