"""bench_report_path's stages in CPU time, for A/B runs on a shared machine.

    cd TREE && PYTHONPATH=proto:hooks:sidecar python /path/to/bench/probes/ab_cpu.py \
        [--repeats 10] [--workers 2000] >> OUT/TREE.jsonl

The same workers and reports as bench/bench_report_path.py, but each stage is
timed with ``time.thread_time`` (CPU time of this thread: time spent waiting
for a core on a loaded machine does not count) and the limits are set far
above any starvation, with the own-clock freeze check off, so that a slow
round on a busy box cannot take a worker off the rules' fast path or make
the tick sweep every session. Imports either source layout (the regrouped
one, and 0c67e06's), so one copy of this file measures both trees. Prints
one JSON line: min and median over the repeats of each stage.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = ["bench"]  # the measured tree's own loadgen and make_engine

from bench_report_path import make_engine  # noqa: E402
from harness.loadgen import Sim  # noqa: E402

from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.core.judge.rules import RuleConfig  # noqa: E402
from trainprobe.sidecar.core.session.registry import Registry  # noqa: E402
from trainprobe.sidecar.core.session.thresholds import StallPolicy  # noqa: E402

try:
    from trainprobe.sidecar.transport import pb as convert
except ImportError:  # 0c67e06's layout (by name: the tests check static imports against HEAD)
    convert = importlib.import_module("trainprobe.sidecar.convert")  # type: ignore[assignment]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--workers", type=int, default=2000)
    args = p.parse_args()
    n = args.workers
    reg = Registry()
    sims = [Sim("load", r, n, 2, 1000) for r in range(n)]
    now = time.monotonic()
    states = []
    for sim in sims:
        state = reg.open(convert.hello_from_pb(sim.hello), now)
        reg.apply(state, convert.report_from_pb(sim.report().report), now)
        states.append(state)
    cfg = RuleConfig(heartbeat_timeout_s=3600.0, stall=StallPolicy(floor_s=3600.0))
    engine = make_engine(reg, cfg, Path(tempfile.mkdtemp(prefix="tp-ab-")))
    engine.freeze_after_s = float("inf")  # rounds seconds apart here: not a frozen loop
    clock = time.thread_time
    got: dict[str, list[float]] = {"parse": [], "convert": [], "apply": [], "tick": []}
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
        assert not engine.tick(), "every simulated worker is healthy"
        t4 = clock()
        for stage, dt in (("parse", t1 - t0), ("convert", t2 - t1), ("apply", t3 - t2)):
            got[stage].append(dt / n * 1e6)
        got["tick"].append((t4 - t3) * 1e3)
    out = {f"{k}_min": min(v) for k, v in got.items()}
    out.update({f"{k}_med": statistics.median(v) for k, v in got.items()})
    for how in ("min", "med"):
        out[f"per_report_{how}"] = sum(out[f"{k}_{how}"] for k in ("parse", "convert", "apply"))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
