"""How fast this machine runs plain Python right now: a fixed dict loop, in ms.

    python bench/probes/speed_probe.py

Best of 5 runs of the same 2M-iteration loop, in this thread's CPU time. The
VM these benchmarks run on changes speed by tens of per cent within minutes
(bench/HISTORY.md); a figure taken next to a probe says which
state it was taken in.
"""

from __future__ import annotations

import time


def _loop() -> dict[int, int]:
    d: dict[int, int] = {}
    for i in range(2_000_000):
        d[i & 1023] = d.get(i & 1023, 0) + i
    return d


def probe_ms(runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.thread_time()
        _loop()
        best = min(best, time.thread_time() - t0)
    return best * 1000


if __name__ == "__main__":
    print(f"speed probe: {probe_ms():.0f} ms")
