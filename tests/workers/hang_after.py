"""A torch-free worker with the hook that steps, then hangs: for health probes
and the sidecar-only install test.

Usage: hang_after.py JOB_ID STEPS [--ignore-term]
Steps every 50 ms, prints "hang <pid>" and sleeps in its step. With
--ignore-term it ignores SIGTERM, so only the sidecar's SIGKILL after
kill_grace_s ends it (the health service's NOT_SERVING then lasts that long).
"""

from __future__ import annotations

import signal
import sys
import time

from trainprobe.hooks import LivenessProbeHook


def main() -> int:
    job, steps = sys.argv[1], int(sys.argv[2])
    if "--ignore-term" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hook = LivenessProbeHook(interval_ms=100, job_id=job, rank=0, world_size=1)
    for step in range(1, steps + 1):
        time.sleep(0.05)
        hook.on_step_end(step)
    print(f"hang {__import__('os').getpid()}", flush=True)
    time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
