"""One run of the report path for valgrind's instruction counts (issue 15).

    cd TREE && PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \\
        --cachegrind-out-file=/dev/null python /path/to/bench/probes/cachegrind_telemetry.py \\
        {gen|parse|conv|base|tel|tel_notrace|tel_nometrics} ROUNDS WORKERS

``WORKERS`` simulated ranks each send ``ROUNDS`` reports (2 steps and 8
collective issue times each) through the stages the mode names: ``gen`` makes
the bytes, ``parse`` parses them, ``conv`` also converts them, ``base`` also
applies them to the registry, ``tel`` also runs ``Telemetry.on_report``
(``tel_notrace`` / ``tel_nometrics``: with tracing or metrics off). A stage's
cost per report is the difference of two modes' counts; the marginal cost,
free of set-up, is that difference between ROUNDS=12 and ROUNDS=6 over
6 x WORKERS reports. The garbage collector is off and the exporters' timers
are an hour, so only this thread's work is counted. Runs from the checkout
it is started in (``bench``, ``sidecar``, ``proto``, ``hooks`` on the path).
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path[:0] = ["bench", "sidecar", "proto", "hooks"]

from harness.loadgen import Sim  # noqa: E402

from trainprobe.proto import probe_pb2  # noqa: E402
from trainprobe.sidecar.core.session.registry import Registry  # noqa: E402
from trainprobe.sidecar.otel.telemetry import start_telemetry  # noqa: E402
from trainprobe.sidecar.transport import pb as convert  # noqa: E402

MODES = ("gen", "parse", "conv", "base", "tel", "tel_notrace", "tel_nometrics")


async def run(mode: str, rounds: int, n: int) -> None:
    settings = SimpleNamespace(
        telemetry=True,
        otlp_endpoint=None,
        state_dir=Path(tempfile.mkdtemp(prefix="tp-cg-")),
        metrics_port=None,
        metrics_host="127.0.0.1",
        trace_every_n_steps=100,
    )
    reg = Registry()
    hour = {"OTEL_METRIC_EXPORT_INTERVAL": "3600000", "OTEL_BSP_SCHEDULE_DELAY": "3600000"}
    tel = start_telemetry(settings, reg.workers, env=hour, lags=reg.arrivals.lags)
    assert tel is not None
    sims = [Sim("load", r, n, 2, 0, 8) for r in range(n)]
    now = 1000.0
    states = [reg.open(convert.hello_from_pb(s.hello), now) for s in sims]
    gc.disable()
    tel.tracing = tel.tracing and mode != "tel_notrace"
    tel.pipeline.metrics = tel.pipeline.metrics and mode != "tel_nometrics"
    parse = probe_pb2.WorkerMessage.FromString
    for _ in range(rounds):
        msgs = [s.report().SerializeToString() for s in sims]
        if mode == "gen":
            continue
        if mode == "parse":
            for b in msgs:
                parse(b)
            continue
        reports = [convert.report_from_pb(parse(b).report) for b in msgs]
        now += 0.1
        if mode == "conv":
            continue
        for st, rep in zip(states, reports, strict=True):
            reg.apply(st, rep, now)
        if mode.startswith("tel"):
            for st, rep in zip(states, reports, strict=True):
                tel.on_report(st, rep)
        reg.arrivals.sweep(now + 5.0)


def main() -> None:
    mode, rounds, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {', '.join(MODES)}")
    random.seed(1)
    asyncio.run(run(mode, rounds, n))
    os._exit(0)  # no exporter shutdown: it would count too


if __name__ == "__main__":
    main()
