"""A fake client: raw gRPC, a hand-built Hello, then silence.

Usage: impostor.py TARGET HELLO_JSON [--record FILE] [--ticket] [--token T]
       [--reports N] [--total-steps N]

HELLO_JSON holds Hello fields; ``"pid": "self"`` means this process's pid and
``"stack_file": "self"`` the stack file name a hook would use, in the folder
``"stack_dir"`` (created here, or as a FIFO with ``"fifo": true``). With
``--ticket`` the client first takes an identity ticket from the sidecar, as a
real hook does: it is then verified as itself (and only as itself). It
sends N reports 0.1 s apart and then stays connected without a word, like a
hung process. With ``--record`` it records every signal it is sent (see
sacrifice.py). It prints ``ended CODE details`` when the sidecar ends its
stream.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterator

import grpc
from sacrifice import record_signals  # a sibling: this folder is the script's sys.path[0]

from trainprobe.proto import bearer_metadata, probe_pb2

CONNECT = "/trainprobe.v1.Sidecar/Connect"


def talk(
    target: str, token: str, messages: Iterator[probe_pb2.WorkerMessage], stop: threading.Event
) -> None:
    """Send ``messages`` on one Connect stream, reading and ignoring what the sidecar
    says (an Abort too: the test ends this process), until the sidecar ends it:
    then print ``ended CODE details`` and set ``stop``, which ``messages`` waits on."""
    target = target if "://" in target or not target.startswith("/") else f"unix://{target}"
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            CONNECT,
            request_serializer=probe_pb2.WorkerMessage.SerializeToString,
            response_deserializer=probe_pb2.Command.FromString,
        )(messages, metadata=bearer_metadata(token or None))
        try:
            for _command in call:
                pass
            print("ended OK", flush=True)
        except grpc.RpcError as err:
            print(f"ended {err.code().name} {err.details()}", flush=True)
        stop.set()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("hello")
    p.add_argument("--record", default="")
    p.add_argument("--ticket", action="store_true")
    p.add_argument("--token", default="")
    p.add_argument("--reports", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=3)
    args = p.parse_args()
    fields = json.loads(args.hello)
    if fields.get("pid") == "self":
        fields["pid"] = os.getpid()
    fifo = fields.pop("fifo", False)
    folder = fields.pop("stack_dir", "")
    if fields.get("stack_file") == "self":
        path = os.path.join(folder, f"stacks-{os.getpid()}.txt")
        if fifo:
            os.mkfifo(path, 0o600)
        else:
            open(path, "w").close()
        fields["stack_file"] = path
    if args.record:
        record_signals(args.record)
    ticket = b""
    if args.ticket:
        try:
            from trainprobe.proto import fetch_ticket
        except ImportError:  # a sidecar from before identity tickets
            fetch_ticket = None
        if fetch_ticket is not None:
            ticket = fetch_ticket(args.target)
    hello = probe_pb2.Hello(**fields)
    if ticket:
        hello.identity_ticket = ticket
    print(f"ticket {len(ticket)} bytes", flush=True)
    stop = threading.Event()

    def messages():
        yield probe_pb2.WorkerMessage(hello=hello)
        for seq in range(1, args.reports + 1):
            now = time.monotonic_ns()
            yield probe_pb2.WorkerMessage(
                report=probe_pb2.Report(
                    seq=seq,
                    mono_ns=now,
                    wall_ns=time.time_ns(),
                    has_step=True,
                    last_step=seq,
                    last_step_mono_ns=now - 1000,
                    total_steps=args.total_steps,
                )
            )
            time.sleep(0.1)
        stop.wait()  # silent, still connected

    talk(args.target, args.token, messages(), stop)
    while True:  # stay around (and keep recording) until the test ends us
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
