"""The sidecar's per-report Python work, stage by stage, without the network.

    python bench/bench_report_path.py [--workers 2000] [--repeats 7] [--quick] [--json OUT]

The same reports the scale benchmark's load generator sends (2 new steps,
each worker's step-time window already full with 1,000 samples) go through
the sidecar's own code in this process: ``WorkerMessage.FromString``,
``convert.report_from_pb``, ``Registry.apply`` (validation, clock offsets, the
step-time window and its p99), one rules pass (``rules.evaluate``) over all
workers, and one whole ``Engine.tick`` (the rules plus verdicts, incident and
episode bookkeeping; every worker healthy, so nothing is dispatched). Each
stage is timed over all workers, ``--repeats`` times; the minimum is kept
(the least disturbed run). This is the part of the report path that
trainprobe's own code controls; the rest is gRPC's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from harness.common import add_repo_to_path, write_result

add_repo_to_path()

from harness.loadgen import Sim  # noqa: E402

from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.act.actions import Actions  # noqa: E402
from trainprobe.sidecar.act.incident_log import IncidentLog  # noqa: E402
from trainprobe.sidecar.act.killers import SignalKiller  # noqa: E402
from trainprobe.sidecar.core.incident.policy import ActionPolicy  # noqa: E402
from trainprobe.sidecar.core.judge.rules import RuleConfig, evaluate  # noqa: E402
from trainprobe.sidecar.core.session.registry import Registry  # noqa: E402
from trainprobe.sidecar.engine.loop import Engine  # noqa: E402
from trainprobe.sidecar.transport import pb as convert  # noqa: E402
from trainprobe.sidecar.transport.commander import Commander  # noqa: E402


def make_engine(reg: Registry, cfg: RuleConfig, log_dir: Path) -> Engine:
    """The sidecar's own engine over ``reg``, every action ``observe``."""
    commander = Commander()
    incident_log = IncidentLog(log_dir / "incidents.jsonl")
    actions = Actions(reg, commander, incident_log, SignalKiller(commander))
    policy = ActionPolicy(on_hung="observe", on_unresponsive="observe")
    return Engine(reg, cfg, policy, incident_log, actions)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="3 repeats")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.quick:
        args.repeats = min(args.repeats, 3)
    started = time.monotonic()
    n = args.workers
    reg = Registry()
    sims = [Sim("load", r, n, 2, 1000) for r in range(n)]
    now = time.monotonic()
    states = []
    for sim in sims:
        state = reg.open(convert.hello_from_pb(sim.hello), now)
        reg.apply(state, convert.report_from_pb(sim.report().report), now)
        states.append(state)
    cfg = RuleConfig()
    engine = make_engine(reg, cfg, Path(tempfile.mkdtemp(prefix="tp-rp-")))
    best = {"parse": 1e9, "convert": 1e9, "apply": 1e9, "tick": 1e9, "engine_tick": 1e9}
    clock = time.perf_counter
    for _ in range(args.repeats):
        wire = [sim.report().SerializeToString() for sim in sims]
        t0 = clock()
        msgs = [probe_pb2.WorkerMessage.FromString(b) for b in wire]
        t1 = clock()
        reports = [convert.report_from_pb(m.report) for m in msgs]
        t2 = clock()
        now = time.monotonic()
        for state, report in zip(states, reports, strict=True):
            reg.apply(state, report, now)
        t3 = clock()
        evaluate(list(reg), cfg, time.monotonic())
        t4 = clock()
        opened = engine.tick()
        t5 = clock()
        assert not opened, "every simulated worker is healthy"
        best["engine_tick"] = min(best["engine_tick"], (t5 - t4) * 1e3)
        for stage, dt in (("parse", t1 - t0), ("convert", t2 - t1), ("apply", t3 - t2)):
            best[stage] = min(best[stage], dt / n * 1e6)
        best["tick"] = min(best["tick"], (t4 - t3) * 1e3)
    per_report = best["parse"] + best["convert"] + best["apply"]
    # Fraction of a core spent ticking, at the default 10 ticks/s.
    tick_share_at_10hz = best["engine_tick"] * 10 / 1000
    data = {
        "workers": n,
        "repeats": args.repeats,
        "parse_us": best["parse"],
        "convert_us": best["convert"],
        "apply_us": best["apply"],
        "per_report_us": per_report,
        "tick_ms": best["tick"],
        "engine_tick_ms": best["engine_tick"],
        "tick_core_share": tick_share_at_10hz,
        "python_ceiling_per_s": (1 - tick_share_at_10hz) / (per_report / 1e6),
    }
    print(
        f"per report: parse {best['parse']:.1f} µs, convert {best['convert']:.1f} µs, "
        f"apply {best['apply']:.1f} µs (total {per_report:.1f} µs); over {n} workers: rules "
        f"{best['tick']:.1f} ms, whole engine tick {best['engine_tick']:.1f} ms "
        f"({tick_share_at_10hz:.0%} of a core at 10 ticks/s); ceiling "
        f"without gRPC: {data['python_ceiling_per_s']:,.0f} reports/s"
    )
    if args.json:
        write_result(args.json, "report_path", data, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
