"""``trainprobe``: ask a running sidecar what it sees.

trainprobe status [--target ADDR] [--job J] [--json]
trainprobe diagnose [--job J] [--target ADDR] [--json]
trainprobe diagnose --ray [--dot] [--target ADDR] [--json]
trainprobe top [--target ADDR] [--job J] [--by lag|step] [--interval-s 1] [--once]

Settings of the sidecar: ``trainprobe-sidecar --list-settings``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

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
)


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
        start = (
            "trainprobe-sidecar" if where.kind == "unix" else f"trainprobe-sidecar --listen {where}"
        )
        return f"no sidecar at {where}: start one with `{start}`, or pass --target"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"the sidecar at {where} refused the token: pass --token or set TRAINPROBE_TOKEN"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (
            f"the sidecar at {where} did not answer within {timeout_s:g} s: "
            "retry with a larger --timeout-s"
        )
    first = details.splitlines()[0] if details else ""
    return f"sidecar at {where}: {code.name}: {first}"


def _stub(args: argparse.Namespace) -> tuple[probe_pb2_grpc.SidecarStub, tuple, grpc.Channel]:
    where = _endpoint(args.target)
    # A socket in a directory another user could write may be an impostor's.
    check_socket_dir(where)
    channel = grpc.insecure_channel(where.grpc_target)
    token = args.token or os.environ.get("TRAINPROBE_TOKEN")
    metadata = bearer_metadata(token)
    return probe_pb2_grpc.SidecarStub(channel), metadata, channel


def _bytes(n: int) -> str:
    return f"{n / 2**30:.1f}G" if n else "-"


def _sync_text(w: probe_pb2.WorkerStatus) -> str:
    if w.inflight_age_s >= 1.0:
        # A collective stuck for seconds matters more than past latencies.
        return f"wait {w.inflight_age_s:.0f}s"
    if not w.sync_max_s:
        return "-"
    return f"{w.sync_p50_s * 1000:.1f}/{w.sync_max_s * 1000:.1f}ms"


def format_status(reply: probe_pb2.StatusReply) -> str:
    """The human table of ``trainprobe status``."""
    head = (
        f"{'JOB':<20} {'RANK':>4} {'PID':>7} {'STEP':>8} {'STEPS/S':>8} {'AGE':>6} "
        f"{'STALL':>7} {'PHASE':<12} {'GPU MEM':>13} {'SYNC P50/MAX':>14} {'VERDICT':<12} STATE"
    )
    # Jobs are labelled by name (the id when the hook sent none), printed whole:
    # users copy them into `diagnose --job`, which takes either.
    width = max([20, *(len(w.job_name or w.job_id) for w in reply.workers)])
    head = f"{'JOB':<{width}}" + head[20:]
    lines = [head]
    for w in reply.workers:
        gpu = "-"
        if w.HasField("gpu_memory"):
            g = w.gpu_memory
            gpu = (
                f"{_bytes(g.device_used_bytes)}/{_bytes(g.device_total_bytes)}"
                if g.has_nvml
                else _bytes(g.reserved_bytes)
            )
        step = str(w.step) if w.has_step else "-"
        sync = _sync_text(w)
        verdict, state = w.verdict, w.state
        if w.killed_rule:
            # What happened to it, not how its stream ended.
            verdict, state = "KILLED", f"by {w.killed_rule} (incident {w.killed_incident})"
        elif w.suspect:
            verdict, state = "HUNG?", w.suspect.removeprefix("HUNG? ")
        job = w.job_name or w.job_id
        lines.append(
            f"{job:<{width}} {w.rank:>4} {w.pid:>7} {step:>8} {w.steps_per_s:>8.2f} "
            f"{w.report_age_s:>5.1f}s {w.stall_threshold_s:>6.0f}s {(w.phase or '-')[:12]:<12} "
            f"{gpu:>13} {sync:>14} {verdict:<12} {state}"
        )
    if not reply.workers and not reply.omitted:
        lines.append("(no workers have reported)")
    if reply.omitted:
        lines.append(
            f"({reply.omitted} more workers not shown: the reply is size-bounded; "
            "narrow it with --job)"
        )
    if reply.HasField("ray_watch"):
        lines += format_ray_watch(reply.ray_watch)
    return "\n".join(lines)


def format_ray_watch(rw: probe_pb2.RayWatchStatus) -> list[str]:
    """The Ray watcher's part of ``trainprobe status``: one line, then one per finding."""
    age = f"{rw.last_snapshot_age_s:.1f}s ago" if rw.last_snapshot_age_s >= 0 else "none yet"
    head = (
        f"RAY WATCHER: {rw.snapshots} snapshots (last {age}), {rw.cpu_s:.2f} CPU s, "
        f"{len(rw.findings)} finding{'' if len(rw.findings) == 1 else 's'}"
    )
    lines = ["", head]
    if rw.truncated:
        lines.append(
            f"  lists cut at their limit (edges may be missing): {', '.join(rw.truncated)}"
        )
    lines += [f"  error: {e}" for e in rw.errors]
    for f in rw.findings:
        lines.append(
            f"  {f.rule} job {f.job_id} incident {f.incident_id} action {f.action}: {f.text}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="trainprobe",
        description=__doc__.split("\n\n")[0],
        epilog="The sidecar's settings: trainprobe-sidecar --list-settings",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("status", "one row per worker: rank, pid, step, steps/s, report age, phase, verdict"),
        ("diagnose", "the current culprit analysis of a job"),
        ("top", "a live view: ranks x recent windows by arrival lag or step time, incidents"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument(
            "--target",
            help=f"sidecar address (default ${DEFAULT_TARGET_ENV} or the per-user socket)",
        )
        p.add_argument("--token", help="bearer token for TCP sidecars (default $TRAINPROBE_TOKEN)")
        p.add_argument(
            "--job",
            default="",
            help="job id or name (diagnose: optional when the sidecar serves one job)",
        )
        p.add_argument("--timeout-s", type=float, default=5.0, help="RPC deadline in seconds")
        if name == "top":
            p.add_argument("--by", choices=["lag", "step"], default="lag", help="colour cells by")
            p.add_argument("--interval-s", type=float, default=1.0, help="refresh period")
            p.add_argument("--once", action="store_true", help="print one frame and exit")
        else:
            p.add_argument("--json", action="store_true", help="print JSON")
        if name == "diagnose":
            p.add_argument(
                "--ray", action="store_true", help="the Ray watcher's current wait graph"
            )
            p.add_argument("--dot", action="store_true", help="with --ray: as Graphviz DOT")
    args = parser.parse_args(argv)
    if args.command == "diagnose" and args.dot and not args.ray:
        parser.error("--dot goes with --ray")
    try:
        stub, metadata, channel = _stub(args)
    except (EndpointError, UnsafeSocketDir) as err:
        print(f"trainprobe: error: {err}", file=sys.stderr)
        return 2
    try:
        if args.command == "top":
            from trainprobe.sidecar.cli.top import fetcher, run

            fetch = fetcher(stub, metadata, args.job, args.timeout_s)
            return run(fetch, max(0.1, args.interval_s), args.by, once=args.once)
        if args.command == "status":
            reply = stub.GetStatus(
                probe_pb2.StatusRequest(job_id=args.job), timeout=args.timeout_s, metadata=metadata
            )
            if args.json:
                # Zeros included: "completed": 0 is a sequence number, not an absence.
                as_dict = json_format.MessageToDict(
                    reply, always_print_fields_with_no_presence=True
                )
                print(json.dumps(as_dict, indent=2))
            else:
                print(format_status(reply))
        else:
            diag = stub.Diagnose(
                probe_pb2.DiagnoseRequest(job_id=args.job, ray=args.ray, dot=args.dot),
                timeout=args.timeout_s,
                metadata=metadata,
            )
            print(diag.json if args.json else diag.text)
            if diag.truncated_chars:
                print(
                    f"trainprobe: the diagnosis was cut ({diag.truncated_chars} characters "
                    "left out); the incident log has it whole",
                    file=sys.stderr,
                )
    except KeyboardInterrupt:
        return 130
    except grpc.RpcError as err:
        line = error_line(err, _endpoint(args.target), args.timeout_s)
        print(f"trainprobe: error: {line}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
