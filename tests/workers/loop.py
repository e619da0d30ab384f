"""A torch-free training loop with the hook, for resilience tests.

Usage: loop.py STEPS STEP_S PROGRESS_FILE [--dataloader] [--forks N]
Writes "step <n> <monotonic>" lines, then "done <seconds_in_on_step_end>".
"""

from __future__ import annotations

import logging
import sys
import time

from trainprobe.hooks import LivenessProbeHook


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    steps, step_s, progress = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    hook = LivenessProbeHook(interval_ms=100, job_id="loop", rank=0, world_size=1)
    if "--dataloader" in sys.argv:
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        data = DataLoader(
            TensorDataset(torch.arange(64.0)),
            batch_size=8,
            num_workers=2,
            multiprocessing_context="fork",
        )
        assert sum(float(b[0].sum()) for b in data) == sum(range(64))
    if "--forks" in sys.argv:
        # Bare forks while the reporter thread is inside gRPC: each child must exit 0.
        import gc
        import os

        for _ in range(int(sys.argv[sys.argv.index("--forks") + 1])):
            pid = os.fork()
            if pid == 0:
                gc.collect()
                time.sleep(0.01)
                os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0, "a forked child crashed"
    in_hook = 0.0
    with open(progress, "w", buffering=1) as out:
        for step in range(1, steps + 1):
            time.sleep(step_s)
            t0 = time.perf_counter()
            hook.on_step_end(step)
            in_hook += time.perf_counter() - t0
            out.write(f"step {step} {time.monotonic():.6f} {int(hook.connected)}\n")
        # The reporter thread must have survived whatever the sidecar did.
        alive = hook._reporter is not None and hook._reporter.alive
        out.write(f"done {in_hook:.6f} {int(alive)}\n")
    hook.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
