"""``trainprobe run --replicas N [--nproc-per-replica K] -- python train.py ...``

One command for a replicated job on this machine: a torchft lighthouse, a
sidecar (unless one already answers at ``$TRAINPROBE_TARGET`` or the per-user
socket), and N replica groups of K processes each (run_groups.py), each
restarted alone when it fails. The script makes itself replicated with
``model, opt = replicate(hook, model, opt)`` (trainprobe.hooks.replica.replicate).
The sidecar evicts a hung group (it ends that group's processes); this
launcher restarts the group, which fetches live state from a peer. Ctrl-C
(SIGINT) or SIGTERM stops every group (SIGTERM, then SIGKILL after
``--stop-grace-s``), the lighthouse and a sidecar it started, and exits
128 + the signal. Otherwise the exit status is 0 once every group finished
with 0, else the status of the first group given up (``--max-restarts``).

Why our own launcher rather than torchrun: torchrun restarts all of its ranks
together, so one torchrun per replica group is needed anyway (docs/DEPLOY.md's
hand-built recipe), plus a lighthouse started by hand; and its restarts come
without a delay between failures. Flags keep torchrun's names where they mean
the same (``--max-restarts``, ``--run-id``, ``--master-addr``); ``--log-dir``
holds the lighthouse's log only (the groups print to the launcher's output,
prefixed), where torchrun's holds its ranks' logs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import grpc

from trainprobe.proto import (
    DEFAULT_TARGET_ENV,
    check_socket_dir,
    default_socket_path,
    parse_endpoint,
    probe_pb2,
    probe_pb2_grpc,
)
from trainprobe.proto.lighthouse import HEARTBEAT_TIMEOUT_MS, JOIN_TIMEOUT_MS
from trainprobe.sidecar.cli.run.groups import Backoff, ReplicaGroup, pump, say
from trainprobe.sidecar.cli.run.lighthouse import LaunchError as _LaunchError
from trainprobe.sidecar.cli.run.lighthouse import start_lighthouse
from trainprobe.sidecar.core.text import printable

__all__ = ["add_run_parser", "run_main"]

LAUNCHER = "[trainprobe run]"
DESCRIPTION = (
    "Start a torchft lighthouse, a sidecar (unless one answers at $TRAINPROBE_TARGET or "
    "the per-user socket) and N replica groups of K processes of the command, each "
    "restarted alone (with a growing delay while it keeps failing) when it exits non-zero. "
    "The script makes itself replicated with `model, opt = replicate(hook, model, opt)`. "
    "Ctrl-C stops everything and exits 130; otherwise the status is 0 once every group "
    "finished, else that of the first group given up. See docs/RECOVERY.md."
)


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a replicated (torchft) job: lighthouse, sidecar, N replica groups",
        description=DESCRIPTION,
        # argparse would end the usage with "...", which never says the "--".
        usage="%(prog)s [options] -- COMMAND [ARG ...]",
    )
    p.add_argument("--replicas", type=int, default=2, help="replica groups (default: %(default)s)")
    p.add_argument(
        "--nproc-per-replica",
        type=int,
        default=1,
        help="ranks in each group (default: %(default)s: each rank its own replica, so a "
        "hang replaces one rank only)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=10,
        help="restarts of each group before it is given up (default: %(default)s)",
    )
    p.add_argument("--run-id", default="", help="job id (default: $TRAINPROBE_JOB_ID, or new)")
    p.add_argument(
        "--master-addr",
        default="127.0.0.1",
        help="address of the groups' stores and the lighthouse (default: %(default)s)",
    )
    p.add_argument(
        "--heartbeat-timeout-ms",
        type=int,
        default=HEARTBEAT_TIMEOUT_MS,
        help="the lighthouse drops a group whose heartbeats are this old (default: "
        "%(default)s; torchft's 5000 delays the survivors' next quorum by 5 s)",
    )
    p.add_argument(
        "--join-timeout-ms",
        type=int,
        default=JOIN_TIMEOUT_MS,
        help="how long a quorum waits for groups that heartbeat but have not joined "
        "(default: %(default)s; torchft's 60000)",
    )
    p.add_argument(
        "--backoff-s",
        type=float,
        default=1.0,
        help="restart delay after a second failure in a row; the first restarts at once "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--backoff-max-s",
        type=float,
        default=30.0,
        help="restart delay cap; the delay doubles for each further failure within 60 s "
        "of a start (default: %(default)s)",
    )
    p.add_argument(
        "--stop-grace-s",
        type=float,
        default=10.0,
        help="SIGTERM to SIGKILL when stopping (default: %(default)s)",
    )
    p.add_argument("--no-sidecar", action="store_true", help="never start a sidecar")
    p.add_argument(
        "--log-dir",
        default="",
        help="for the lighthouse's log only, at info: the groups print to this output, "
        "prefixed, torchft's lines in them at RUST_LOG=warn unless set (default: a new "
        "temporary directory)",
    )
    p.add_argument(
        "train", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the training command"
    )


def run_main(args: argparse.Namespace) -> int:
    command = list(args.train)
    if command and command[0] == "--":
        command = command[1:]
    if not command or args.replicas < 1 or args.nproc_per_replica < 1:
        print("trainprobe run: error: give --replicas >= 1 and a command after --", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None:  # else each group's start dies in a traceback
        print(
            f"trainprobe run: error: {printable(command[0])}: command not found "
            "(not an executable file, nor on PATH)",
            file=sys.stderr,
        )
        return 127
    stop: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop.append(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="trainprobe-run-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    helpers: list[subprocess.Popen[bytes]] = []
    groups: list[ReplicaGroup] = []
    try:
        lighthouse = start_lighthouse(args, log_dir, helpers)
        target = os.environ.get(DEFAULT_TARGET_ENV) or f"unix://{default_socket_path()}"
        if not args.no_sidecar and not _serving(target, 1.0):
            _start_sidecar(target, helpers)
        run_id = args.run_id or os.environ.get("TRAINPROBE_JOB_ID") or f"run-{uuid.uuid4().hex[:8]}"
        env = dict(
            os.environ,
            TORCHFT_LIGHTHOUSE=lighthouse,
            NUM_REPLICA_GROUPS=str(args.replicas),
            TRAINPROBE_JOB_ID=run_id,
            PYTHONUNBUFFERED=os.environ.get("PYTHONUNBUFFERED", "1"),
            # torchft's Rust side logs every quorum and commit at info: a line a step.
            RUST_LOG=os.environ.get("RUST_LOG", "warn"),
            **{DEFAULT_TARGET_ENV: target},
        )
        say(
            LAUNCHER,
            f"job {run_id}: {args.replicas} replica groups x {args.nproc_per_replica} ranks, "
            f"lighthouse {lighthouse} (its log in {log_dir}), sidecar {target}",
        )
        for i in range(args.replicas):
            backoff = Backoff(first_s=args.backoff_s, max_s=args.backoff_max_s)
            groups.append(
                ReplicaGroup(
                    i, args.nproc_per_replica, command, env, args.master_addr, backoff,
                    args.max_restarts,
                )
            )  # fmt: skip
        while not stop and any(g.result is None for g in groups):
            now = time.monotonic()
            for g in groups:
                g.poll(now, next((d.name for d in groups if d.result == 0), ""))
            time.sleep(0.1)
    except _LaunchError as err:
        print(f"trainprobe run: error: {err}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        deadline = time.monotonic() + args.stop_grace_s
        for g in groups:
            g.signal(signal.SIGTERM)
        for g in groups:
            g.reap(deadline)
        for h in helpers:
            h.terminate()
        for h in helpers:
            try:
                h.wait(10)
            except subprocess.TimeoutExpired:
                h.kill()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if stop:
        say(LAUNCHER, f"stopped by {signal.Signals(stop[0]).name}")
        return 128 + stop[0]
    failed = [g for g in groups if g.result]
    say(LAUNCHER, "job " + (f"failed: {failed[0].name} given up" if failed else "finished"))
    return int(failed[0].result or 1) if failed else 0


def _serving(target: str, timeout_s: float) -> bool:
    """Whether a sidecar answers at ``target`` (any answer but 'unavailable')."""
    try:
        where = check_socket_dir(parse_endpoint(target))
    except Exception as err:
        raise _LaunchError(f"sidecar target {target}: {err}") from None
    with grpc.insecure_channel(where.grpc_target) as channel:
        try:
            probe_pb2_grpc.SidecarStub(channel).GetStatus(
                probe_pb2.StatusRequest(job_id="-"), timeout=timeout_s
            )
        except grpc.RpcError as err:
            return err.code() not in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            )
    return True


def _start_sidecar(target: str, helpers: list[Any]) -> None:
    if not target.startswith("unix://"):
        raise _LaunchError(f"no sidecar answers at {target}; start one there, or --no-sidecar")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainprobe.sidecar", "--listen", target],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    helpers.append(proc)
    threading.Thread(target=pump, args=(proc, "[sidecar]"), daemon=True).start()
    deadline = time.monotonic() + 60
    while not _serving(target, 1.0):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise _LaunchError(f"the sidecar did not start on {target}")
        time.sleep(0.2)
