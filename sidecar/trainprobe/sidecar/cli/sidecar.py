"""``trainprobe-sidecar``: run the per-node sidecar."""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
from collections.abc import Sequence
from typing import Any

from trainprobe.proto import UnsafeSocketDir
from trainprobe.sidecar.act.incident_log import IncidentLogError
from trainprobe.sidecar.cli.flags import Parser
from trainprobe.sidecar.config.settings import (
    OPTIONS,
    Settings,
    SettingsError,
    defaults,
    load_settings,
)
from trainprobe.sidecar.core.text import configure_logging
from trainprobe.sidecar.otel import TelemetryError
from trainprobe.sidecar.relay.node import RelayNode
from trainprobe.sidecar.server import ListenError, Sidecar

EPILOG = """\
Every option can also be set in a TOML file (--config) or as TRAINPROBE_<NAME>
in the environment; flags win over the environment, which wins over the file.
Full reference: trainprobe-sidecar --list-settings (the same text as
docs/CONFIG.md in the source tree)."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="trainprobe-sidecar",
        description="Watch the training processes on this node: detect hung, unresponsive, "
        "degraded and dead workers, and act on them. With --relay-to, run no rules here: "
        "forward every worker stream to an upstream sidecar, which judges them all, and "
        "carry out its commands and kills on this node.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", metavar="FILE", help="TOML settings file (env TRAINPROBE_CONFIG)"
    )
    parser.add_argument(
        "--list-settings",
        action="store_true",
        help="print the reference of every setting (Markdown) and exit",
    )
    dflt = defaults()
    for opt in OPTIONS:
        default = opt.default_text or dflt[opt.name]
        help_text = f"{opt.doc} [default: {default}; env {opt.env}]"
        if isinstance(dflt[opt.name], bool):
            parser.add_argument(
                opt.flag,
                dest=opt.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        elif opt.repeatable:
            parser.add_argument(
                opt.flag,
                dest=opt.name,
                action="append",
                default=None,
                metavar="ADDR",
                help=help_text,
            )
        else:
            parser.add_argument(
                opt.flag, dest=opt.name, default=None, metavar="VALUE", help=help_text
            )
    return parser


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    """Parse flags into :class:`Settings`; exit 2 with a clear message on error."""
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    if args.pop("list_settings"):
        # Installed packages carry no docs/: the reference is rendered from
        # the option table itself, as docs/CONFIG.md is.
        from trainprobe.sidecar.config.settings import render_markdown

        sys.stdout.write(render_markdown())
        parser.exit(0)
    config = args.pop("config")
    cli: dict[str, Any] = {k: v for k, v in args.items() if v is not None}
    try:
        return load_settings(config=config, cli=cli)
    except SettingsError as err:
        parser.exit(2, f"trainprobe-sidecar: error: {err}\n")
    raise AssertionError  # unreachable


#: Allocations (net of frees) of GC-tracked objects between young-generation
#: collections; Python's default is 700. See :func:`tune_gc`.
GC_GEN0_THRESHOLD = 20_000


def tune_gc() -> None:
    """Make the cyclic garbage collector cheaper for a long-running sidecar.

    Everything that exists once the sidecar has started (modules, settings,
    servers) lives as long as the process: ``gc.freeze()`` takes it out of
    every later collection. The report path allocates many short-lived
    objects (messages, report data), nearly all freed by reference counting;
    collecting the young generation every 700 of them mostly re-scans live
    state. Measured with bench/bench_scale.py (relayed, N = 2,000): see
    bench/HISTORY.md.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


async def serve(settings: Settings) -> None:
    """Run a sidecar (a relay node with ``relay_to``) until SIGINT or SIGTERM."""
    sidecar: Sidecar | RelayNode = RelayNode(settings) if settings.relay_to else Sidecar(settings)
    await sidecar.start()
    tune_gc()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, sidecar.request_stop)
    print(f"trainprobe-sidecar ready on {', '.join(sidecar.addresses)}", flush=True)
    await sidecar.wait_stopped()
    await sidecar.stop()


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    if settings.ray_per_node:
        from trainprobe.sidecar.ray import start_sidecars
        from trainprobe.sidecar.ray.link import RayUnavailable

        try:
            placed = start_sidecars(settings)
        except (RayUnavailable, ConnectionError) as err:  # no cluster there: say so, once
            print(f"trainprobe-sidecar: error: --ray-per-node: {err}", file=sys.stderr)
            return 1
        for p in placed:
            what = p.error or f"{'started' if p.created else 'already running'} on {p.socket}"
            print(f"Ray node {p.node_id}: {what}")
        ok = [p for p in placed if not p.error]
        print(f"trainprobe sidecars running on {len(ok)} of {len(placed)} Ray node(s)")
        return 0 if len(ok) == len(placed) else 1
    try:
        asyncio.run(serve(settings))
    except UnsafeSocketDir as err:  # a refused setup, like a bad argument
        print(f"trainprobe-sidecar: error: {err}", file=sys.stderr)
        return 2
    except (ListenError, TelemetryError, IncidentLogError) as err:
        print(f"trainprobe-sidecar: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
