"""The ``trainprobe report`` command line: sample the sidecar, read the log, write the page."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from trainprobe.sidecar.core.text import printable

__all__ = ["add_report_args", "report_main"]


def add_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log", help="the incident log (default: the sidecar's, as `incidents`)")
    p.add_argument("--config", metavar="FILE", help="the sidecar's TOML settings file")
    p.add_argument(
        "--out", default="trainprobe-report", help="directory to write into (default: %(default)s)"
    )
    p.add_argument(
        "--watch-s",
        type=float,
        default=10.0,
        help="seconds of live status to sample into the heatmaps (0: none; default: %(default)s)",
    )
    p.add_argument(
        "--interval-s", type=float, default=1.0, help="sampling period (default: %(default)s s)"
    )


def report_main(args: argparse.Namespace, stub: Any, metadata: tuple) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "trainprobe: error: `trainprobe report` draws with matplotlib: "
            "pip install 'trainprobe[report]'",
            file=sys.stderr,
        )
        return 2
    from trainprobe.sidecar.cli.history import default_log_path
    from trainprobe.sidecar.cli.incidents import read_log, stories
    from trainprobe.sidecar.cli.report_page import ReportData, write_report
    from trainprobe.sidecar.cli.top import TopModel, fetcher
    from trainprobe.sidecar.core.jobnames import names_of, resolve_job

    job = args.job
    model = TopModel()
    data = ReportData(job_id=job)
    fetch = fetcher(stub, metadata, job, args.timeout_s)
    diagnoses: dict[str, dict] = {}
    cells: dict[tuple[str, int], list[tuple[float | None, float | None]]] = {}
    deadline = time.monotonic() + max(0.0, args.watch_s)
    try:
        while True:
            reply, diagnoses = fetch()
            model.update(reply, diagnoses, time.monotonic())
            here = {(w.job_id, w.rank) for w in reply.workers}
            for key, row in model.rows.items():
                # Every window a column; a rank absent from this status is a blank.
                col = cells.setdefault(key, [(None, None)] * len(data.times))
                col.append(row.cells[-1] if key in here and row.cells else (None, None))
            data.times.append(time.time())
            if time.monotonic() + args.interval_s > deadline:
                break
            time.sleep(max(0.1, args.interval_s))
    except grpc.RpcError as err:
        if not data.times:  # after the fact: the log alone still tells the story
            data.notes.append(f"the sidecar was not reached ({err.code().name}): no live samples")
    jobs = sorted({j for j, _ in model.rows})
    log_path = Path(args.log) if args.log else default_log_path(args.config)
    records: list[dict[str, Any]] = []
    try:
        records, problems = read_log(log_path)
    except OSError as err:
        data.notes.append(f"no incident log read at {log_path}: {err.strerror}")
        problems = []
    for p in problems:
        print(f"trainprobe: warning: {p}", file=sys.stderr)
    found = stories(records)
    if job:
        # A name stands for its job, as the sidecar (status) or the log knows it.
        names = names_of(
            [(w.status.job_id, w.status.job_name) for w in model.rows.values()]
            + [
                (str(s.incident.get("job_id")), str(s.incident.get("job_name") or ""))
                for s in found
            ]
        )
        try:
            job = resolve_job(job, names)
        except LookupError as err:
            print(f"trainprobe: error: {err}", file=sys.stderr)
            return 1
    else:
        known = jobs or sorted({str(s.incident.get("job_id")) for s in found})
        if len(known) != 1:
            print(
                f"trainprobe: error: {len(known)} jobs "
                f"({', '.join(printable(k) for k in known[:5]) or 'none'}): "
                "pass --job",
                file=sys.stderr,
            )
            return 1
        job = known[0]
    data.job_id = job
    data.stories = [s for s in found if s.incident.get("job_id") == job]
    data.diagnosis = diagnoses.get(job) or {}
    for (j, rank), col in sorted(cells.items()):
        if j == job:
            data.cells[rank] = col
    page = write_report(data, Path(args.out))
    print(f"wrote {page} ({len(data.stories)} incident(s), {len(data.times)} samples)")
    return 0
