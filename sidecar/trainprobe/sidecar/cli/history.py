"""The ``trainprobe incidents`` command line (the reading is in :mod:`.incidents`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from trainprobe.sidecar.cli.incidents import (
    of_job,
    parse_since,
    read_log,
    stories,
    summary_line,
    timeline,
)

__all__ = ["add_incidents_parser", "default_log_path", "incidents_main"]


def add_incidents_parser(sub: Any) -> None:
    p = sub.add_parser(
        "incidents",
        help="past incidents from the incident log: one line each, or one's timeline",
    )
    p.add_argument("id", nargs="?", help="show this incident's timeline")
    p.add_argument(
        "--log",
        help="the incident log (default: the sidecar's, from --config, TRAINPROBE_INCIDENT_LOG "
        "or TRAINPROBE_STATE_DIR)",
    )
    p.add_argument("--config", metavar="FILE", help="the sidecar's TOML settings file")
    p.add_argument("--job", default="", help="only this job's incidents (its id or name)")
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
        records, problems = read_log(path)
    except FileNotFoundError:
        print(
            f"trainprobe: error: no incident log at {path}: no incident yet, or pass --log "
            "(the sidecar's --incident-log or <state_dir>/incidents.jsonl)",
            file=sys.stderr,
        )
        return 1
    except OSError as err:
        print(f"trainprobe: error: cannot read {path}: {err.strerror}", file=sys.stderr)
        return 1
    for line in problems:
        print(f"trainprobe: warning: {line}", file=sys.stderr)
    found = stories(records)
    if args.job:
        try:
            found = of_job(found, args.job)
        except LookupError as err:  # a name that several jobs have
            print(f"trainprobe: error: {err}", file=sys.stderr)
            return 1
    if since is not None:
        found = [s for s in found if float(s.incident.get("time") or 0) >= since]
    if args.id:
        chosen = [s for s in found if s.id == args.id]
        if not chosen:
            print(f"trainprobe: error: no incident {args.id!r} in {path}", file=sys.stderr)
            return 1
        if args.json:
            print(
                json.dumps(
                    {**chosen[0].to_json(), "records": [chosen[0].incident, *chosen[0].later]},
                    indent=2,
                )
            )
        else:
            print("\n".join(timeline(chosen[0])))
        return 0
    if args.json:
        print(json.dumps([s.to_json() for s in found], indent=2))
    elif not found:
        print(f"(no incidents in {path}{' for that job' if args.job else ''})")
    else:
        print("\n".join(summary_line(s) for s in found))
    return 0
