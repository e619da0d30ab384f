"""trainprobe: ask a running sidecar what it sees, or run a replicated job.

trainprobe status [--target ADDR] [--job J] [--wide] [--json]
trainprobe diagnose [--job J] [--target ADDR] [--json]
trainprobe diagnose --ray [--dot] [--target ADDR] [--json]
trainprobe top [--target ADDR] [--job J] [--by lag|step] [--interval-s 1] [--once]
trainprobe incidents [ID] [--log FILE] [--job J] [--since 2h] [--json]
trainprobe report [--job J] [--target ADDR] [--log FILE] [--out DIR] [--watch-s 10]
trainprobe run --replicas N [--nproc-per-replica K] -- python train.py ...

Settings of the sidecar: ``trainprobe-sidecar --list-settings``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc
from google.protobuf import json_format

from trainprobe.proto import (
    DEFAULT_TARGET_ENV,
    Endpoint,
    EndpointError,
    UnsafeSocketDir,
    bearer_metadata,
    check_socket_dir,
    default_socket_path,
    parse_endpoint,
    probe_pb2,
    probe_pb2_grpc,
    resolve_socket,
)
from trainprobe.sidecar.cli.flags import Parser
from trainprobe.sidecar.cli.incidents.history import add_incidents_parser, incidents_main
from trainprobe.sidecar.cli.output import guarded_output, quiet_broken_pipe, styled_stdout
from trainprobe.sidecar.cli.report.command import add_report_args, report_main
from trainprobe.sidecar.cli.run.command import add_run_parser, run_main
from trainprobe.sidecar.cli.status_text import (
    STATUS_WIDTH,
    format_diagnosis,
    format_ray_watch,
    format_status,
    troubled_jobs,
)
from trainprobe.sidecar.core.text import printable

#: Characters of a gRPC status's details an error line shows.
MAX_DETAILS = 1000


def _endpoint(text: str | None) -> Endpoint:
    return parse_endpoint(text or os.environ.get(DEFAULT_TARGET_ENV) or str(default_socket_path()))


def error_line(err: grpc.RpcError, where: Endpoint, timeout_s: float) -> str:
    """One line that says what went wrong and what to do about it."""
    code, details = err.code(), err.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        if "ermission denied" in details:
            return (
                f"cannot connect to {where}: permission denied (the socket is another "
                "user's: run as that user, or pass --target)"
            )
        # A command the sidecar accepts as it stands, listening where we looked.
        if where.kind == "unix" and where.path == str(default_socket_path()):
            start = "trainprobe-sidecar"
        elif where.kind == "unix":
            start = f"trainprobe-sidecar --listen {where}"
        else:  # a TCP listener refuses to start without a token
            start = f"trainprobe-sidecar --listen {where} --token-file FILE"
        return f"no sidecar at {where}: start one with `{start}`, or pass --target"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"the sidecar at {where} refused the token: pass --token or set TRAINPROBE_TOKEN"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (
            f"the sidecar at {where} did not answer within {timeout_s:g} s: "
            "retry with a larger --timeout-s"
        )
    # The details may quote a client's job ids: one escaped line, never a forged second.
    first = printable(details[:MAX_DETAILS]) + ("..." if len(details) > MAX_DETAILS else "")
    return f"sidecar at {where}: {code.name}: {first}"


def _stub(args: argparse.Namespace) -> tuple[probe_pb2_grpc.SidecarStub, tuple, grpc.Channel]:
    # A socket in a directory another user could write may be an impostor's
    # (one in a shared directory is looked for in this user's own one in it).
    where = check_socket_dir(_endpoint(args.target))
    pinned = getattr(args, "tls_cert_file", None) or os.environ.get("TRAINPROBE_TLS_CERT_FILE")
    if pinned and where.kind != "unix":
        # The sidecar's own certificate as the only root: the token goes to it alone.
        try:
            with open(pinned, "rb") as fh:
                creds = grpc.ssl_channel_credentials(root_certificates=fh.read())
        except OSError as err:
            raise EndpointError(f"--tls-cert-file {pinned}: {err.strerror}") from None
        channel = grpc.secure_channel(where.grpc_target, creds)
    else:
        channel = grpc.insecure_channel(where.grpc_target)
    token = args.token or os.environ.get("TRAINPROBE_TOKEN")
    if getattr(args, "token_file", None):
        from trainprobe.sidecar.config.settings import SettingsError, read_token_file

        try:
            token = read_token_file(Path(args.token_file))
        except SettingsError as err:
            raise EndpointError(str(err)) from None
    metadata = bearer_metadata(token)
    return probe_pb2_grpc.SidecarStub(channel), metadata, channel


__all__ = ["error_line", "format_ray_watch", "format_status", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    # Every line out, errors and argparse's included, goes through one escaping writer.
    with guarded_output():
        return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = Parser(
        prog="trainprobe",
        description=__doc__.split("\n\n")[0],
        epilog="The sidecar's settings: trainprobe-sidecar --list-settings",
    )
    parser.elsewhere = {"sidecar": " (the sidecar is a command of its own: trainprobe-sidecar)"}
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("status", "one row per worker: rank, pid, step, steps/s, report age, phase, verdict"),
        ("diagnose", "the current culprit analysis of a job"),
        ("top", "a live view: ranks x recent windows by arrival lag or step time, incidents"),
        ("report", "an HTML page (and PNGs) of a job: step-time and lag heatmaps, incidents"),
    ):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--target",
            help=f"sidecar address (default ${DEFAULT_TARGET_ENV} or the per-user socket)",
        )
        p.add_argument("--token", help="bearer token for TCP sidecars (default $TRAINPROBE_TOKEN)")
        p.add_argument(
            "--token-file", help="file whose first line is the token (not shown in ps; chmod 600)"
        )
        p.add_argument(
            "--tls-cert-file",
            help="over TCP, the sidecar's TLS certificate (its --tls-cert-file), the only one "
            "trusted (default $TRAINPROBE_TLS_CERT_FILE)",
        )
        which = {
            "diagnose": "optional when one job runs, finished ones aside",
            # One page is of one job: with several known it asks for --job.
            "report": "optional when the sidecar, or else the incident log, knows one job",
        }.get(name, "default: every job")
        p.add_argument(
            "--job", default="", help=f"job id or name; id:J for the id J alone ({which})"
        )
        p.add_argument(
            "--timeout-s", type=float, default=5.0, help="RPC deadline (default: %(default)s s)"
        )
        if name == "top":
            p.add_argument(
                "--by",
                choices=["lag", "step"],
                default="lag",
                help="colour cells by (default: %(default)s)",
            )
            p.add_argument(
                "--interval-s",
                type=float,
                default=1.0,
                help="refresh period (default: %(default)s s)",
            )
            p.add_argument("--once", action="store_true", help="print one frame and exit")
        elif name != "report":
            p.add_argument("--json", action="store_true", help="print JSON")
        if name == "status":
            p.add_argument(
                "--wide",
                action="store_true",
                help=f"every column, one row per worker (default: fits {STATUS_WIDTH} columns)",
            )
        if name == "report":
            add_report_args(p)
        if name == "diagnose":
            p.add_argument(
                "--ray", action="store_true", help="the Ray watcher's current wait graph"
            )
            p.add_argument("--dot", action="store_true", help="with --ray: as Graphviz DOT")
    add_incidents_parser(sub)
    add_run_parser(sub)
    if not (sys.argv[1:] if argv is None else argv):
        # argparse's "the following arguments are required: command" names none of them.
        *first, last = sub.choices
        parser.error(f"which command? {', '.join(first)} or {last} (see trainprobe --help)")
    args = parser.parse_args(argv)
    if args.command == "incidents":
        return incidents_main(args)
    if args.command == "run":
        return run_main(args)
    if args.command == "diagnose" and args.dot and not args.ray:
        parser.error("--dot goes with --ray")
    try:
        stub, metadata, channel = _stub(args)
    except (EndpointError, UnsafeSocketDir) as err:
        print(f"trainprobe: error: {err}", file=sys.stderr)
        return 2
    try:
        if args.command == "top":
            from trainprobe.sidecar.cli.top.live import fetcher, run

            fetch = fetcher(stub, metadata, args.job, args.timeout_s)
            with styled_stdout():
                return run(fetch, max(0.1, args.interval_s), args.by, args.once, args.job)
        if args.command == "report":
            return report_main(args, stub, metadata)
        if args.command == "status":
            reply = stub.GetStatus(
                probe_pb2.StatusRequest(job_id=args.job), timeout=args.timeout_s, metadata=metadata
            )
            unknown = bool(args.job) and not reply.workers and not reply.omitted
            if args.json:
                # Zeros included: "completed": 0 is a sequence number, not an absence.
                as_dict = json_format.MessageToDict(
                    reply, always_print_fields_with_no_presence=True
                )
                print(json.dumps(as_dict, indent=2))
            elif not unknown:  # said below, on stderr: others' workers may have reported
                # Who is at fault and who waits: asked only for jobs in trouble.
                diagnoses = {}
                for job in troubled_jobs(reply):
                    with contextlib.suppress(grpc.RpcError, ValueError):
                        d = stub.Diagnose(
                            probe_pb2.DiagnoseRequest(job_id=job),
                            timeout=args.timeout_s,
                            metadata=metadata,
                        )
                        found = json.loads(d.json)
                        if isinstance(found, dict):
                            diagnoses[job] = found
                print(format_status(reply, wide=args.wide, diagnoses=diagnoses))
            if unknown:
                # As diagnose does (NOT_FOUND): a script asking for one job learns
                # it is not here, rather than reading an empty table as healthy.
                print(
                    f"trainprobe: no worker of job {printable(args.job)} is known to this "
                    "sidecar (trainprobe status, without --job, lists the jobs it has)",
                    file=sys.stderr,
                )
                return 1
        else:
            diag = stub.Diagnose(
                probe_pb2.DiagnoseRequest(job_id=args.job, ray=args.ray, dot=args.dot),
                timeout=args.timeout_s,
                metadata=metadata,
            )
            print(diag.json if args.json else format_diagnosis(diag.text, args.ray))
            if diag.truncated_chars:
                print(
                    f"trainprobe: the diagnosis was cut ({diag.truncated_chars} characters "
                    "left out); the incident log has it whole",
                    file=sys.stderr,
                )
    except KeyboardInterrupt:
        return 130
    except grpc.RpcError as err:
        line = error_line(err, resolve_socket(_endpoint(args.target)), args.timeout_s)
        print(f"trainprobe: error: {line}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
