"""A burst of stream opens: does every stream of a burst stay open?

    python bench/bench_burst.py [--streams 10000] [--generators 2]
        [--per-channel 50] [--hold-s 10] [--telemetry on|off] [--json OUT]

One sidecar process of the shipped defaults (actions ``observe``) and
``--generators`` client processes that open ``--streams`` Connect streams
between them at once (``--per-channel`` on each connection, as
bench/harness/loadgen.py does), each sending a Hello and a report (1,000 step times,
a full first report), then holding it ``--hold-s`` with a report a second,
then a Goodbye. Every stream that ended otherwise is counted by its status
code, with how long after its open it ended and the sidecar's log lines
about it. Goal: none.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.common import add_repo_to_path, write_result

add_repo_to_path()

import grpc  # noqa: E402
from harness.loadgen import Sim  # noqa: E402

PARAMS = ("streams", "generators", "per_channel", "hold_s", "telemetry")

from tests.support import PYTHON, SidecarProcess, child_env, short_tmpdir  # noqa: E402
from trainprobe.proto import probe_pb2, probe_pb2_grpc  # noqa: E402


async def one(stub: Any, sim: Sim, t_go: float, hold_s: float, out: list[Any]) -> None:
    t0 = time.monotonic()
    call = stub.Connect()
    where = "hello"
    try:
        await call.write(probe_pb2.WorkerMessage(hello=sim.hello))
        where = "report"
        await call.write(sim.report())
        where = "hold"
        end = t_go + hold_s
        while time.monotonic() < end:
            await asyncio.sleep(min(1.0, max(0.0, end - time.monotonic())))
            await call.write(sim.report())
        where = "goodbye"
        await call.write(probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye(reason="burst done")))
        await call.done_writing()
        where = "status"
        code = await call.code()
        if code != grpc.StatusCode.OK:
            out.append([code.name, where, time.monotonic() - t0, await call.details()])
    except grpc.RpcError as err:
        code = err.code() if hasattr(err, "code") else None
        # A write on a call that already ended raises INTERNAL ("execute_batch"):
        # the call's own status says why it ended.
        try:
            real = await asyncio.wait_for(call.code(), 10.0)
            details = await call.details()
        except (asyncio.TimeoutError, grpc.RpcError):
            real, details = code, "(no status within 10 s)"
        out.append(
            [
                getattr(real, "name", str(real)),
                where,
                round(time.monotonic() - t0, 3),
                details,
                str(err)[:300],
            ]
        )
    finally:
        call.cancel()


async def generate(args: argparse.Namespace) -> dict[str, Any]:
    sims = [Sim("burst", args.rank_offset + i, args.world, 20, 1000) for i in range(args.workers)]
    channels = [
        grpc.aio.insecure_channel(args.target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(0, args.workers, args.per_channel)
    ]
    out: list[Any] = []
    t_go = time.monotonic()
    await asyncio.gather(
        *(
            one(
                probe_pb2_grpc.SidecarStub(channels[i // args.per_channel]),
                s,
                t_go,
                args.hold_s,
                out,
            )
            for i, s in enumerate(sims)
        )
    )
    for ch in channels:
        await ch.close()
    return {"failed": out, "opened": len(sims)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument("--per-channel", type=int, default=50)
    p.add_argument("--hold-s", type=float, default=10.0)
    p.add_argument("--telemetry", choices=["on", "off"], default="on")
    p.add_argument("--json", default="")
    # A generator process (internal).
    p.add_argument("--target", default="")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--rank-offset", type=int, default=0)
    p.add_argument("--world", type=int, default=0)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.target:
        Path(args.out).write_text(json.dumps(asyncio.run(generate(args))))
        return 0
    started = time.monotonic()
    load0 = os.getloadavg()
    work = short_tmpdir("tpburst-")
    flags = ["--on-hung", "observe", "--on-unresponsive", "observe", "--log-level", "warning"]
    flags.append("--telemetry" if args.telemetry == "on" else "--no-telemetry")
    sc = SidecarProcess(work, *flags).start(timeout_s=120)
    try:
        per = [
            args.streams // args.generators + (i < args.streams % args.generators)
            for i in range(args.generators)
        ]
        procs, off = [], 0
        t0 = time.monotonic()
        for g, n in enumerate(per):
            cmd = [PYTHON, __file__, "--target", sc.target, "--workers", str(n)]
            cmd += ["--rank-offset", str(off), "--world", str(args.streams)]
            cmd += ["--per-channel", str(args.per_channel), "--hold-s", str(args.hold_s)]
            cmd += ["--out", str(work / f"gen{g}.json")]
            procs.append(subprocess.Popen(cmd, env=child_env()))
            off += n
        for proc in procs:
            proc.wait(600)
        wall = time.monotonic() - t0
        alive = sc.proc is not None and sc.proc.poll() is None
    finally:
        sc.stop()
    failed = [
        f
        for g in range(len(per))
        for f in json.loads((work / f"gen{g}.json").read_text())["failed"]
    ]
    by_code = collections.Counter(f"{f[0]} at {f[1]}" for f in failed)
    log = sc.log_text().splitlines()
    notes = collections.Counter(
        line.split(": ", 1)[-1][:80] for line in log if "WARNING" in line or "ERROR" in line
    )
    print(f"{len(failed)} of {args.streams} streams failed ({dict(by_code)}) in {wall:.1f} s")
    for f in failed[:5]:
        print("  ", f)
    for text, n in notes.most_common(8):
        print(f"  log x{n}: {text}")
    if args.json:
        data = {
            "params": {
                k: v
                for k, v in vars(args).items()
                if k in ("streams", "generators", "per_channel", "hold_s", "telemetry")
            },
            "failed": len(failed),
            "by_code": dict(by_code),
            "examples": failed[:10],
            "wall_s": wall,
            "sidecar_alive": alive,
            "load_at_start": load0,
        }
        write_result(args.json, "burst", data, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
