"""A torch-free worker that trains, then hangs with its reporter still running.

Usage: hang.py JOB STEPS [STEP_S]
Steps STEPS times (STEP_S apart, default 0.05 s), prints "hung", then never
steps again: the sidecar must find it HUNG and kill it.
"""

from __future__ import annotations

import sys
import time

from trainprobe.hooks import LivenessProbeHook


def main() -> int:
    job, steps = sys.argv[1], int(sys.argv[2])
    step_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
    hook = LivenessProbeHook(interval_ms=100, job_id=job, rank=0, world_size=1)
    for step in range(1, steps + 1):
        time.sleep(step_s)
        hook.on_step_end(step)
    print("hung", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
