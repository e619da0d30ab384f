"""Peak memory of ``trainprobe incidents`` and ``report`` over a large incident log.

The commands stream the log (cli/incidents/log_stream.py): their peak RSS must not grow
with it. This writes a log of ``--mb`` megabytes of sidecar-like records (per
incident: the incident, a decision and an action, ~150 bytes a record as the
sidecar writes them for a small job) and runs, each in its own process, as an
operator would:

- ``trainprobe incidents --json --log LOG > /dev/null``
- ``trainprobe incidents --log LOG > /dev/null``
- ``trainprobe report --job J --log LOG --watch-s 0`` (no sidecar: the log alone)

printing each one's peak RSS (the kernel's, from wait4) and wall time.
Target: <= 200 MB for a 1 GB log (``--mb 1024``). ``--quick``: 64 MB.

    python bench/bench_incident_log.py --mb 1024 --json bench/results/incident_log.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.common import write_result

REPO = Path(__file__).resolve().parents[1]


def write_log(path: Path, size: int, jobs: int = 4) -> int:
    """A log of about ``size`` bytes; returns the number of incidents in it."""
    n = 0
    with open(path, "w") as f:
        written = 0
        while written < size:
            key = f"i{n:09d}"
            job = f"job-{n % jobs}"
            lines = (
                f'{{"type":"incident","id":"{key}","time":{1.78e9 + n},"job_id":"{job}",'
                f'"rule":"stall","verdict":"HUNG","ranks":[0,1],"pids":[{n},{n + 1}],'
                f'"culprits":[1],"waiting":[0],"action":"kill","detection_latency_s":3.1,'
                f'"diagnosis":{{"kind":"straggler","text":"rank 1 stalled",'
                f'"where":{{"1":"train.py:42"}}}}}}\n'
                f'{{"type":"decision","incident_id":"{key}","act":true,"rule":"confirmed",'
                f'"decided_after_s":4.2,"why":"stack unchanged"}}\n'
                f'{{"type":"action","incident_id":"{key}","action":"kill","outcomes":'
                f'{{"1":{{"exited":true,"pid":{n + 1},"signals":["SIGTERM"],"seconds":0.4}}}}}}\n'
            )
            f.write(lines)
            written += len(lines)
            n += 1
    return n


def peak_rss(argv: list[str]) -> tuple[float, float, int]:
    """(peak RSS in MB, seconds, exit status) of ``trainprobe argv``."""
    env = dict(os.environ)
    roots = [str(REPO / d) for d in ("proto", "hooks", "sidecar")]
    env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    start = time.monotonic()
    with open(os.devnull, "w") as null:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainprobe.sidecar.cli.ctl", *argv],
            stdout=null,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    return usage.ru_maxrss / 1024, time.monotonic() - start, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1024, help="log size in MB (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="a 64 MB log")
    ap.add_argument("--dir", help="where to write the log (default: a temporary directory)")
    ap.add_argument("--json", default="", help="write the result file here (with its command)")
    args = ap.parse_args()
    mb = 64 if args.quick else args.mb
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        log = Path(tmp) / "incidents.jsonl"
        t0 = time.monotonic()
        incidents = write_log(log, mb * 1024 * 1024)
        print(
            f"wrote {log.stat().st_size / 1e6:.0f} MB ({incidents:,} incidents, "
            f"{3 * incidents:,} records) in {time.monotonic() - t0:.0f} s",
            file=sys.stderr,
        )
        out = Path(tmp) / "page"
        runs = {
            "incidents --json": ["incidents", "--json", "--log", str(log)],
            "incidents": ["incidents", "--log", str(log)],
            "report --job job-1": [
                "report", "--job", "job-1", "--log", str(log), "--watch-s", "0",
                "--target", "unix:///nonexistent/trainprobe.sock", "--out", str(out),
            ],
        }  # fmt: skip
        results = {}
        for name, argv in runs.items():
            rss, took, code = peak_rss(argv)
            results[name] = {"peak_rss_mb": round(rss, 1), "seconds": round(took, 1), "exit": code}
            print(f"{name:<20} peak RSS {rss:7.1f} MB  {took:6.1f} s  exit {code}", file=sys.stderr)
    if args.json:
        data = {"log_mb": mb, "incidents": incidents, "records": 3 * incidents, "runs": results}
        write_result(args.json, "incident_log", data | {"target_peak_rss_mb": 200}, started)
    ok = all(r["exit"] == 0 and r["peak_rss_mb"] <= 200 for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
