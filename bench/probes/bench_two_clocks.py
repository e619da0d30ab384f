"""Issue 12's two clocks, a small check under the shipped defaults (not the fault matrix).

    python bench/probes/bench_two_clocks.py [--trials 5] [--ranks 2] [--json OUT]

2-rank gloo DDP jobs (``tests/workers/ddp_worker.py``, ~50 ms steps, the hook's
default 1 s interval, **no** ``watch_ddp``), a sidecar with no flags at all.
Per trial one rank either sleeps inside its step (ambiguous: verdict expected
within seconds, the kill only after the patience, so the trial ends at the
verdict) or SIGSTOPs itself (definitive: killed at once). Onset is the
sidecar's own estimate (the last step); the figures are read from the
incident log: ``published`` = the incident with the named culprit,
``decided`` = the ``decision`` record of the kill. The full fault matrix
(issue 12 item 8) is a separate benchmark.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _bench  # noqa: F401  (bench/ on sys.path)
from harness.common import add_repo_to_path, write_result

add_repo_to_path()

from tests.support import Workers, short_tmpdir, sidecar, wait_for  # noqa: E402

ARGS = ["--steps", "3000", "--step-s", "0.02", "--interval-ms", "1000"]


def trial(mode: str, ranks: int, i: int) -> dict[str, object]:
    hang = [*ARGS, "--hang-rank", "1", "--hang-at", "40", "--hang-how", mode]
    job = f"{mode}{i}"
    with sidecar() as sc, Workers(ranks, sc.target, short_tmpdir(), job_id=job, args=hang):
        inc = sc.wait_incident(lambda r: r["job_id"] == job and r["verdict"] != "DEAD", 240)
        out: dict[str, object] = {
            "mode": mode,
            "verdict_s": inc["detection_latency_s"],
            "published_s": inc["decision"]["stalled_s"],
            "culprits": inc["diagnosis"]["culprits"],
            "right": inc["diagnosis"]["culprits"] == [1],
        }
        if mode == "stop":
            dec = wait_for(lambda: [r for r in sc.incidents("decision") if r["job_id"] == job], 60)[
                0
            ]
            action = wait_for(lambda: sc.incidents("action"), 60)[0]
            out.update(
                decided_s=dec["decided_after_s"],
                rule=dec["rule"],
                killed=sorted(action.get("outcomes", {})),
            )
        else:
            time.sleep(5.0)  # well inside the patience: nothing may be killed yet
            killed = [k for a in sc.incidents("action") for k in a.get("outcomes", {})]
            out.update(rule="", killed=sorted(killed))
        return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--json", default="")
    args = p.parse_args()
    started = time.monotonic()
    rows = [trial(m, args.ranks, i) for i in range(args.trials) for m in ("sleep", "stop")]
    for mode in ("sleep", "stop"):
        mine = [r for r in rows if r["mode"] == mode]
        pub = statistics.median(float(r["published_s"]) for r in mine)  # type: ignore[arg-type]
        line = f"{mode}: culprit named and published, median {pub:.2f} s after onset"
        if mode == "stop":
            dec = statistics.median(float(r["decided_s"]) for r in mine)  # type: ignore[arg-type]
            line += f"; kill decided, median {dec:.2f} s; killed {[r['killed'] for r in mine]}"
        else:
            line += f"; killed within 5 s after it: {[r['killed'] for r in mine]}"
        right = sum(bool(r["right"]) for r in mine)
        print(f"{line}; culprit right {right}/{len(mine)}")
    if args.json:
        write_result(args.json, "two_clocks", {"rows": rows}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
