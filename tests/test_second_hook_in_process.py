"""A process's second hook, after its first said Goodbye, is judged as a new hook.

The Hugging Face and Lightning callbacks end their hook at the end of each
``train()``/``fit()`` and make a new one at the next, and the start-up hook a
callback module's import makes says Goodbye when the callback's hook takes
over. Each new hook counts its steps from 1 and has its own start-up, but the
sidecar resumed the ended session of the same process with its history: the
second ``train()`` was "stalled" (its steps, below the first's count, were not
seen) and killed while stepping; the callback's hook after a long set-up was
past ``startup_timeout_s`` at its Hello, and killed before its first step.
Real sidecar, real hooks in this process (verified), ``--dry-run``.
"""

from __future__ import annotations

import time

from tests.support import sidecar, wait_for
from trainprobe.hooks import LivenessProbeHook
from trainprobe.hooks.framework.startup import _StartupHook

FLAGS = ("--dry-run", "--settle-s", "0", "--hang-patience-s", "1", "--stall-timeout-s", "1.5")


def _rules(sc, job: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [r["rule"] for r in sc.incidents(job=job)]


def test_a_second_train_that_steps_is_not_a_stall_of_the_first() -> None:
    with sidecar(*FLAGS) as sc:
        first = LivenessProbeHook(target=sc.target, interval_ms=100, job_id="again", rank=0)
        for step in range(1, 201):  # the first train(): 200 steps
            first.on_step_end(step)
        wait_for(lambda: sc.status("again").workers, 10, what="the first hook's report")
        time.sleep(0.3)
        first.close()  # on_train_end: a Goodbye
        time.sleep(2.5)  # between the two: an evaluation, a save
        second = LivenessProbeHook(target=sc.target, interval_ms=100, job_id="again", rank=0)
        try:
            for step in range(1, 41):  # the second train() steps from 1, every 0.1 s
                second.on_step_end(step)
                time.sleep(0.1)
            assert _rules(sc, "again") == [], sc.incidents()
        finally:
            second.close()


def test_the_callbacks_hook_after_the_start_up_hook_has_its_own_start_up() -> None:
    with sidecar(*FLAGS, "--startup-timeout-s", "3") as sc:
        watch = _StartupHook(target=sc.target, interval_ms=100, job_id="handover", rank=0)
        wait_for(lambda: sc.status("handover").workers, 10, what="the start-up hook's report")
        time.sleep(4.0)  # the framework's set-up, past startup_timeout_s: spared
        assert _rules(sc, "handover") == [], sc.incidents()
        watch.close()  # the hand-over: a Goodbye, then the callback's hook
        hook = LivenessProbeHook(target=sc.target, interval_ms=100, job_id="handover", rank=0)
        try:
            time.sleep(2.0)  # its first step takes 2 s, within startup_timeout_s of its Hello
            assert _rules(sc, "handover") == [], sc.incidents()
            hook.on_step_end(1)
            time.sleep(0.3)
            # No step for startup_timeout_s from its own Hello is still a start-up hang.
            fresh = LivenessProbeHook(target=sc.target, interval_ms=100, job_id="late", rank=0)
            try:
                wait_for(lambda: "startup" in _rules(sc, "late"), 10, what="rule startup")
            finally:
                fresh.close()
        finally:
            hook.close()
