"""A step that ends a stall is reported at once, not at the next report interval.

The sidecar decides whether a stall is over from the reports; a hook that
waited a whole interval to say so would let a stall that already ended look
longer than it was (a replicated job's patience is 10 s: an 8 s stall must be
seen over by then). Real sidecar, real hook, a 30 s report interval so that
no scheduled report can be mistaken for the prompt one.
"""

from __future__ import annotations

import time

from tests.support import sidecar, wait_for
from trainprobe.hooks import LivenessProbeHook


def _step(sc, job: str) -> int | None:  # type: ignore[no-untyped-def]
    rows = [w for w in sc.status(job).workers if w.job_id == job]
    return int(rows[0].step) if rows and rows[0].has_step else None


def test_the_step_after_a_stall_reaches_the_sidecar_at_once_and_others_wait() -> None:
    with sidecar() as sc:
        hook = LivenessProbeHook(
            target=sc.target, interval_ms=30_000, job_id="prompt", rank=0, world_size=1
        )
        try:
            wait_for(lambda: sc.status("prompt").workers, 20, 0.1, "the hook's first report")
            # Nothing prompt about ordinary steps: the next report is 30 s away.
            hook.on_step_end(1)
            hook.on_step_end(2)
            time.sleep(2.0)
            assert _step(sc, "prompt") is None
            # A step that follows a stall (longer than the prompt threshold) is sent now.
            hook._prompt_ns = 1_000_000_000
            time.sleep(1.2)
            hook.on_step_end(3)
            wait_for(lambda: _step(sc, "prompt") == 3, 10, 0.05, "step 3 reported at once")
        finally:
            hook.close()
