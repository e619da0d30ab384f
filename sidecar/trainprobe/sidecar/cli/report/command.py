"""The ``trainprobe report`` command line: sample the sidecar, read the log, write the page."""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from trainprobe.sidecar.core.text import printable

if TYPE_CHECKING:
    from trainprobe.sidecar.cli.incidents.log_stream import LogFile

__all__ = ["MAX_REPORT_INCIDENTS", "add_report_args", "report_main"]

#: Incidents a page shows (the job's latest): a page, and its timeline, stay readable.
MAX_REPORT_INCIDENTS = 100


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
        from trainprobe.sidecar.cli.extras import install_hint

        print(
            "trainprobe: error: `trainprobe report` draws with matplotlib, which is not "
            f"installed: {install_hint('report')}",
            file=sys.stderr,
        )
        return 2
    from trainprobe.sidecar.cli.incidents.history import default_log_path
    from trainprobe.sidecar.cli.incidents.log_stream import job_names, log_files
    from trainprobe.sidecar.cli.report.page import ReportData, write_report
    from trainprobe.sidecar.cli.top.live import fetcher
    from trainprobe.sidecar.cli.top.view import TopModel
    from trainprobe.sidecar.core.jobnames import names_of, resolve_job

    job = args.job
    model = TopModel()
    data = ReportData(job_id=job)
    fetch = fetcher(stub, metadata, job, args.timeout_s)
    diagnoses: dict[str, dict] = {}
    cells: dict[tuple[str, int], list[tuple[float | None, float | None]]] = {}
    sampled_steps: list[dict[str, int]] = []
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
            running: dict[str, int] = {}
            for w in reply.workers:  # each job's step, where a rank of it runs
                if w.state == "connected" and w.has_step:
                    running[w.job_id] = max(running.get(w.job_id, w.step), w.step)
            sampled_steps.append(running)
            data.times.append(time.time())
            if time.monotonic() + args.interval_s > deadline:
                break
            time.sleep(max(0.1, args.interval_s))
    except grpc.RpcError as err:
        if not data.times:  # after the fact: the log alone still tells the story
            data.notes.append(f"the sidecar was not reached ({err.code().name}): no live samples")
    jobs = sorted({j for j, _ in model.rows})
    log_path = Path(args.log) if args.log else default_log_path(args.config)
    try:
        files = log_files(log_path)
    except OSError as err:
        data.notes.append(f"no incident log read at {log_path}: {err.strerror}")
        files = []
    live = [(w.status.job_id, w.status.job_name) for w in model.rows.values()]
    if job:
        # A name stands for its job, as the sidecar (status) or the log knows it.
        known = names_of(live + list(job_names(files).items()))
        try:
            job = resolve_job(job, known)
        except LookupError as err:
            print(f"trainprobe: error: {err}", file=sys.stderr)
            return 1
        if job not in known:  # a page of nothing, exit 0, would read as a quiet job
            print(
                f"trainprobe: error: no job {printable(job)!r} is known to the sidecar or "
                f"in the incident log {printable(str(log_path))}; `trainprobe status` and "
                "`trainprobe incidents` show each job's id and its whole name (such as "
                "'train.py 2026-12-02 06:30:12')",
                file=sys.stderr,
            )
            return 1
    else:
        known_jobs = jobs or sorted(job_names(files))
        if len(known_jobs) != 1:
            print(
                f"trainprobe: error: {len(known_jobs)} jobs "
                f"({', '.join(printable(k) for k in known_jobs[:5]) or 'none'}): "
                "pass --job",
                file=sys.stderr,
            )
            return 1
        job = known_jobs[0]
    data.job_id = job
    data.stories, total = _latest_stories(files, job)
    if total > len(data.stories):
        data.notes.append(
            f"the latest {len(data.stories)} of the job's {total} incidents are shown "
            "(trainprobe incidents --job lists them all)"
        )
    data.diagnosis = diagnoses.get(job) or {}
    data.steps = [s.get(job) for s in sampled_steps]
    for (j, rank), col in sorted(cells.items()):
        if j == job:
            data.cells[rank] = col
    page = write_report(data, Path(args.out))
    print(f"wrote {page} ({len(data.stories)} incident(s), {len(data.times)} samples)")
    return 0


def _warn(line: str) -> None:
    print(f"trainprobe: warning: {line}", file=sys.stderr)


def _latest_stories(files: list[LogFile], job: str) -> tuple[list[Any], int]:
    """The job's latest incidents (streamed: the log is never held whole) that can
    be shown, and how many the log has."""
    from trainprobe.sidecar.cli.incidents.log_stream import read_records, shown, stream_stories
    from trainprobe.sidecar.cli.incidents.story import culprit_line, summary_line
    from trainprobe.sidecar.cli.incidents.timeline import timeline

    latest: deque[Any] = deque(maxlen=MAX_REPORT_INCIDENTS)
    total = 0
    for story in stream_stories(read_records(files, _warn), _warn):
        if story.incident.get("job_id") == job:
            latest.append(story)
            total += 1

    def whole(story: Any) -> Any:
        summary_line(story)  # what the page will write: raises here, if at all
        timeline(story)
        culprit_line(story.incident)
        return story

    return list(shown(latest, whole, _warn)), total
