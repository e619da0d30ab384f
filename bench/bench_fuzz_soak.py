"""Fuzz and soak one sidecar: tens of thousands of hostile streams, RSS over time.

    python bench/bench_fuzz_soak.py [--cases 24000] [--mutants 4] [--big-every 200]
        [--sample-s 1] [--quick] [--json OUT]

One sidecar process (stock rules: kill on HUNG and UNRESPONSIVE) and one
real gloo worker with the hook (job ``victim``), connected throughout. The
client sends ``--cases`` Connect streams drawn by Hypothesis from
tests/fuzz_messages.py (every Hello and Report field, bytes that are no
message, messages out of order), each drawn stream followed by ``--mutants``
cheap variants, and every ``--big-every``-th a Hello with a 3.9 MB label
(just under the 4 MiB wire limit). A sampler thread reads the sidecar's RSS
and times one GetStatus every ``--sample-s``.

Goals (issue 13): 0 crashes (a crash status on any stream, or the sidecar
gone), 0 false kills (the worker dies, or an incident or action names its
job), every status call answered, RSS under 150 MB and flat: a plateau, the
last quarter's growth per 1,000 streams compared with the first quarter's.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
import warnings

from harness.common import add_repo_to_path, rss_bytes, summarize, write_result

add_repo_to_path()

import grpc  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.fuzz_messages import (  # noqa: E402
    CRASH_CODES,
    SEEDS,
    STREAMS,
    VICTIM_JOB,
    mutants,
    send_stream,
)
from tests.support import SidecarProcess, Workers, short_tmpdir, wait_for  # noqa: E402
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2, probe_pb2_grpc  # noqa: E402

BIG = probe_pb2.WorkerMessage(
    hello=probe_pb2.Hello(
        protocol_version=PROTOCOL_VERSION,
        job_id="big",
        world_size=1,
        pid=2**31 - 1,
        labels={"blob": "x" * 3_900_000},
    )
).SerializeToString()


class Soak:
    def __init__(self, sc: SidecarProcess, worker: Workers, big_every: int) -> None:
        self.sc, self.worker, self.big_every = sc, worker, big_every
        self.channel = grpc.insecure_channel(sc.target)
        self.codes: collections.Counter[str] = collections.Counter()
        self.crashes: list[str] = []
        self.cases = 0
        self.samples: list[dict[str, float]] = []
        self.status_s: list[float] = []
        self.status_failed = 0
        self.victim_bad: list[str] = []
        self.t0 = time.monotonic()
        self.stop = threading.Event()

    def send(self, messages: list[bytes]) -> None:
        code = send_stream(self.channel, messages)
        self.codes[code.name] += 1
        self.cases += 1
        if code in CRASH_CODES:
            self.crashes.append(f"{code.name}: {[m[:60] for m in messages]}")

    def sample(self, every_s: float) -> None:
        with grpc.insecure_channel(self.sc.target) as ch:
            stub = probe_pb2_grpc.SidecarStub(ch)
            while not self.stop.wait(every_s):
                t = time.monotonic()
                try:
                    rows = stub.GetStatus(
                        probe_pb2.StatusRequest(job_id=VICTIM_JOB), timeout=5
                    ).workers
                    self.status_s.append(time.monotonic() - t)
                    if not rows or rows[0].state != "connected" or rows[0].verdict != "OK":
                        self.victim_bad.append(f"at {self.cases}: {rows}")
                except grpc.RpcError as err:
                    self.status_failed += 1
                    self.victim_bad.append(f"at {self.cases}: status {err.code().name}")
                self.samples.append(
                    {
                        "t_s": round(t - self.t0, 2),
                        "cases": self.cases,
                        "rss_mb": round(rss_bytes(self.sc.proc.pid) / 2**20, 1),
                    }
                )


def plateau(samples: list[dict[str, float]]) -> dict[str, float]:
    """RSS growth per 1,000 streams in the first and in the last quarter of the run."""

    def slope(part: list[dict[str, float]]) -> float:
        if len(part) < 2 or part[-1]["cases"] == part[0]["cases"]:
            return 0.0
        return (part[-1]["rss_mb"] - part[0]["rss_mb"]) / (part[-1]["cases"] - part[0]["cases"])

    q = max(2, len(samples) // 4)
    return {
        "first_quarter_mb_per_1000": round(1000 * slope(samples[:q]), 2),
        "last_quarter_mb_per_1000": round(1000 * slope(samples[-q:]), 2),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", type=int, default=24_000)
    p.add_argument("--mutants", type=int, default=4)
    p.add_argument("--big-every", type=int, default=200)
    p.add_argument("--sample-s", type=float, default=1.0)
    p.add_argument("--quick", action="store_true", help="3,000 streams")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.quick:
        args.cases = min(args.cases, 3000)
    warnings.simplefilter("ignore")  # Hypothesis outside pytest says so once per run
    started = time.monotonic()
    workdir = short_tmpdir()
    with (
        SidecarProcess(workdir, "--kill-grace-s", "1") as sc,
        Workers(
            1,
            sc.target,
            workdir,
            args=["--steps", "100000000", "--step-s", "0.02"],
            job_id=VICTIM_JOB,
        ) as worker,
    ):
        wait_for(lambda: sc.status(VICTIM_JOB).workers, 60, what="the real worker")
        soak = Soak(sc, worker, args.big_every)
        rss_start = rss_bytes(sc.proc.pid) / 2**20
        step_start = worker.max_step()
        sampler = threading.Thread(target=soak.sample, args=(args.sample_s,), daemon=True)
        sampler.start()

        @settings(
            max_examples=max(1, args.cases // (1 + args.mutants)),
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(stream=STREAMS, seed=SEEDS)
        def fuzz(stream: list[bytes], seed: int) -> None:
            for messages in [stream, *mutants(stream, seed, args.mutants)]:
                soak.send(messages)
                if args.big_every and soak.cases % args.big_every == 0:
                    soak.send([BIG])

        fuzz()
        time.sleep(2 * args.sample_s)  # the last samples, after the last stream
        soak.stop.set()
        sampler.join(10)
        alive = sc.proc.poll() is None
        victim_alive = worker.procs[0].poll() is None
        named = [
            r
            for r in sc.incidents("incident") + sc.incidents("action")
            if r.get("job_id") == VICTIM_JOB
        ]
        steps = worker.max_step() - step_start
    rss = [s["rss_mb"] for s in soak.samples]
    result = {
        "cases": soak.cases,
        "statuses": dict(soak.codes),
        "crashes": len(soak.crashes) + (0 if alive else 1),
        "crash_examples": soak.crashes[:5],
        "sidecar_alive": alive,
        "false_kills": (0 if victim_alive else 1) + len(named),
        "victim_alive": victim_alive,
        "victim_steps_during": steps,
        "victim_unhealthy_samples": soak.victim_bad[:5],
        "status_calls": len(soak.status_s) + soak.status_failed,
        "status_failed": soak.status_failed,
        "status_s": summarize(soak.status_s),
        "rss_mb_start": round(rss_start, 1),
        "rss_mb_max": max(rss, default=0.0),
        "rss_mb_end": rss[-1] if rss else 0.0,
        **plateau(soak.samples),
        "samples": soak.samples,
        "args": vars(args),
    }
    print(
        f"{soak.cases} streams: crashes {result['crashes']}, false kills "
        f"{result['false_kills']}, status calls {result['status_calls']} "
        f"({soak.status_failed} failed, median {result['status_s']['median']:.3f} s), "
        f"RSS {rss_start:.0f} -> max {result['rss_mb_max']:.0f} -> end "
        f"{result['rss_mb_end']:.0f} MB; growth per 1,000 streams: first quarter "
        f"{result['first_quarter_mb_per_1000']} MB, last {result['last_quarter_mb_per_1000']} MB"
    )
    if args.json:
        write_result(args.json, "fuzz_soak", result, started)
    ok = not result["crashes"] and not result["false_kills"] and not soak.status_failed
    return 0 if ok and result["rss_mb_max"] < 150 else 1


if __name__ == "__main__":
    sys.exit(main())
