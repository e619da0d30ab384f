"""A raw-gRPC client whose reports follow a control file the test rewrites.

Usage: scripted.py TARGET HELLO_JSON CONTROL_FILE [--ticket] [--token T]
       [--record FILE] [--interval S]

HELLO_JSON holds Hello fields (nested messages as objects); ``"pid": "self"``
means this process's pid. With ``--ticket`` it takes an identity ticket first,
as a real hook does: the kernel then vouches for it (verified, signalled on a
kill); without one (TCP with the token) it is an unverified claim. With
``--record`` it records every signal it is sent (see sacrifice.py) and lives
on through SIGTERM: only SIGKILL ends it.

Every ``--interval`` seconds it reads CONTROL_FILE (JSON; the last good one
stays) and sends one report:

- ``"mode"``: ``"step"`` (one step a report, ending as it is sent, with its
  duration as the step time), ``"freeze"`` (the same step, reports go on) or
  ``"silent"`` (no report, the stream kept open: a hung process);
- ``"step"``: the step number to jump to (an impostor's frozen step, say);
- ``"wait"``: what it says it waits for inside torchft ("quorum",
  "allreduce"), "" for nothing; ``"inflight"``: a collective in flight in
  group "torchft" since the wait began;
- ``"phases"``: active phase names (``init``, ``rendezvous``), each started
  ``"phase_age_s"`` (default 0) before the first report that names it.

It prints ``ticket N bytes`` once connected and ``ended CODE`` when the
sidecar ends its stream.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format
from impostor import talk  # siblings: this folder is the script's sys.path[0]
from sacrifice import record_signals

from trainprobe.proto import probe_pb2

NS = 1_000_000_000


class Script:
    """The control file's latest word, and the state a report is made from."""

    def __init__(self, path: str, interval_s: float, replicated: bool) -> None:
        self.path, self.interval_s, self.replicated = path, interval_s, replicated
        self.ctl: dict[str, Any] = {"mode": "step"}
        self.step = 0
        self.step_at = 0
        self.wait_since: dict[str, int] = {}
        self.phase_start: dict[str, int] = {}
        self.seq = 0

    def read(self) -> None:
        with contextlib.suppress(OSError, ValueError), open(self.path) as f:
            self.ctl = json.load(f)

    def report(self, now: int) -> probe_pb2.Report | None:
        ctl = self.ctl
        if ctl.get("mode") == "silent":
            return None
        self.seq += 1
        r = probe_pb2.Report(seq=self.seq, mono_ns=now, wall_ns=time.time_ns())
        if "step" in ctl and int(ctl["step"]) != self.step and ctl.get("mode") == "freeze":
            self.step, self.step_at = int(ctl["step"]), now - NS
        if ctl.get("mode", "step") == "step":
            self.step += 1
            self.step_at = now
            r.recent_steps.append(self.step)
            r.recent_step_end_mono_ns.append(now)
            r.recent_step_s.append(self.interval_s)
        if self.step:
            r.has_step, r.last_step, r.last_step_mono_ns = True, self.step, self.step_at
            r.total_steps = self.step
        wait = str(ctl.get("wait", ""))
        since = self.wait_since.setdefault(wait, now) if wait else 0
        self.wait_since = {wait: since} if wait else {}
        if self.replicated:
            r.replica.CopyFrom(
                probe_pb2.ReplicaProgress(
                    quorum_id=1,
                    step=self.step,
                    participants=2,
                    waiting=wait,
                    waiting_since_mono_ns=since,
                )
            )
        if ctl.get("inflight") and since:
            r.sync.groups.append(
                probe_pb2.GroupSeq(
                    group="torchft",
                    issued=self.step + 1,
                    completed=self.step,
                    oldest_inflight_start_mono_ns=since,
                    inflight_op="allreduce",
                    inflight_seq=self.step + 1,
                )
            )
        age = int(float(ctl.get("phase_age_s", 0.0)) * NS)
        names = list(ctl.get("phases", []))
        self.phase_start = {n: self.phase_start.get(n, now - age) for n in names}
        for n in names:
            r.active_phases.append(probe_pb2.Phase(name=n, start_mono_ns=self.phase_start[n]))
        return r


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("hello")
    p.add_argument("control")
    p.add_argument("--record", default="")
    p.add_argument("--ticket", action="store_true")
    p.add_argument("--token", default="")
    p.add_argument("--interval", type=float, default=0.1)
    args = p.parse_args()
    fields = json.loads(args.hello)
    if fields.get("pid") == "self":
        fields["pid"] = os.getpid()
    if args.record:
        record_signals(args.record)
    hello = json_format.ParseDict(fields, probe_pb2.Hello())
    if args.ticket:
        from trainprobe.proto import fetch_ticket

        hello.identity_ticket = fetch_ticket(args.target)
    print(f"ticket {len(hello.identity_ticket)} bytes", flush=True)
    script = Script(args.control, args.interval, hello.HasField("replica"))
    stop = threading.Event()

    def messages() -> Iterator[probe_pb2.WorkerMessage]:
        yield probe_pb2.WorkerMessage(hello=hello)
        while not stop.is_set():
            script.read()
            report = script.report(time.monotonic_ns())
            if report is not None:
                yield probe_pb2.WorkerMessage(report=report)
            stop.wait(args.interval)

    talk(args.target, args.token, messages(), stop)
    while True:  # stay around (and keep recording) until the test ends us
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
