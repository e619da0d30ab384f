"""The ``trainprobe incidents`` command line (the reading is in :mod:`.log_stream`,
the records' text in :mod:`.incidents`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainprobe.sidecar.cli.incidents.log_stream import (
    job_names,
    json_array,
    log_files,
    read_records,
    shown,
    stream_stories,
)
from trainprobe.sidecar.cli.incidents.story import IncidentStory, parse_since, summary_line
from trainprobe.sidecar.cli.incidents.timeline import timeline
from trainprobe.sidecar.core.jobnames import resolve_job

__all__ = ["add_incidents_parser", "default_log_path", "incidents_main"]


def add_incidents_parser(sub: Any) -> None:
    about = "past incidents from the incident log: one line each, or one's timeline"
    p = sub.add_parser("incidents", help=about, description=about)
    p.add_argument("id", nargs="?", help="show this incident's timeline")
    p.add_argument(
        "--log",
        help="the incident log (default: the sidecar's, from --config, TRAINPROBE_INCIDENT_LOG "
        "or TRAINPROBE_STATE_DIR)",
    )
    p.add_argument("--config", metavar="FILE", help="the sidecar's TOML settings file")
    p.add_argument(
        "--job", default="", help="only this job's incidents (its id or name; id:J: the id J alone)"
    )
    p.add_argument("--since", help="only incidents since: 90s, 30m, 2h, 1d or an ISO time")
    p.add_argument("--json", action="store_true", help="print JSON")


def default_log_path(config: str | None = None) -> Path:
    """The incident log the sidecar writes under the same settings."""
    from trainprobe.sidecar.config.settings import load_settings

    return load_settings(
        config or os.environ.get("TRAINPROBE_CONFIG"), env=os.environ
    ).incident_log_path


def incidents_main(args: argparse.Namespace) -> int:
    from trainprobe.sidecar.config.settings import SettingsError

    try:
        since = parse_since(args.since) if args.since else None
        path = Path(args.log) if args.log else default_log_path(args.config)
    except (ValueError, SettingsError) as err:
        print(f"trainprobe: error: {err}", file=sys.stderr)
        return 2
    try:
        files = log_files(path)
        # A name stands for its job; an id that is another's name is asked (core/jobnames.py).
        job = resolve_job(args.job, job_names(files)) if args.job else ""
    except FileNotFoundError:
        print(
            f"trainprobe: error: no incident log at {path}: no incident yet, or pass --log "
            "(the sidecar's --incident-log or <state_dir>/incidents.jsonl)",
            file=sys.stderr,
        )
        return 1
    except LookupError as err:  # a name that several jobs have
        print(f"trainprobe: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"trainprobe: error: cannot read {path}: {err.strerror}", file=sys.stderr)
        return 1
    found = stream_stories(read_records(files, _warn), _warn)
    if job:
        found = (s for s in found if s.incident.get("job_id") == job)
    if since is not None:
        found = (s for s in found if float(s.incident.get("time") or 0) >= since)
    try:
        return _show(args, found, path)
    except BrokenPipeError:
        raise
    except OSError as err:  # a file of the set gone or unreadable mid-way
        print(f"trainprobe: error: cannot read {path}: {err.strerror}", file=sys.stderr)
        return 1


def _warn(line: str) -> None:
    print(f"trainprobe: warning: {line}", file=sys.stderr)


def _show(args: argparse.Namespace, found: Iterator[IncidentStory], path: Path) -> int:
    """Print as the stories come: the log is never held whole."""
    if args.id:
        chosen = next((s for s in found if s.id == args.id), None)
        if chosen is None:
            print(f"trainprobe: error: no incident {args.id!r} in {path}", file=sys.stderr)
            return 1
        whole = (
            (lambda s: json.dumps({**s.to_json(), "records": [s.incident, *s.later]}, indent=2))
            if args.json
            else (lambda s: "\n".join(timeline(s)))
        )
        for text in shown([chosen], whole, _warn):
            print(text)
        return 0
    if args.json:
        for piece in json_array(shown(found, IncidentStory.to_json, _warn)):
            sys.stdout.write(piece)
        print()
        return 0
    none = True
    for line in shown(found, summary_line, _warn):
        print(line)
        none = False
    if none:
        print(f"(no incidents in {path}{' for that job' if args.job else ''})")
    return 0
    if args.json:
        print(json.dumps([s.to_json() for s in found], indent=2))
    elif not found:
        print(f"(no incidents in {path}{' for that job' if args.job else ''})")
    else:
        print("\n".join(summary_line(s) for s in found))
    return 0
