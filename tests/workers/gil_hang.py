"""A torch-free rank that trains, then hangs silently: a C call that holds the GIL.

Usage: gil_hang.py JOB RANK WORLD TRIGGER
Steps every 0.05 s until the file TRIGGER exists, prints "hung", then blocks in
``read()`` on an empty pipe through ``ctypes.PyDLL`` (which keeps the GIL, as a
C extension that forgets ``Py_BEGIN_ALLOW_THREADS`` does): no thread runs
Python, so its reporter is silent too, while the kernel shows it sleeping, not
held. Only its node can see that; the upstream must count it as running.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

from trainprobe.hooks import LivenessProbeHook


def main() -> int:
    job, rank, world, trigger = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    hook = LivenessProbeHook(interval_ms=100, job_id=job, rank=rank, world_size=world)
    step = 0
    while not os.path.exists(trigger):
        time.sleep(0.05)
        step += 1
        hook.on_step_end(step)
    print("hung", flush=True)
    r, _w = os.pipe()
    ctypes.PyDLL(None).read(r, ctypes.create_string_buffer(1), 1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
