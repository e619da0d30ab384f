"""A torchrun worker with a plain ``dist.init_process_group("gloo")``.

Usage: restart_init.py PROGRESS_FILE FAIL_ATTEMPTS [--no-hook] [--init-sleep RANK:S]
                       [--framework MODULE [--idle S]]

Each attempt: (the hook, unless --no-hook), init_process_group, one
allreduce, then rank 1 exits 1 while the attempt number is below
FAIL_ATTEMPTS, so that torchrun restarts the group. With --init-sleep
RANK:S that rank sleeps S seconds before init_process_group on attempt 0
(its peers wait for it in the rendezvous). With --framework MODULE
(``lightning``, ``transformers``) no hook is made: the script imports
``trainprobe.hooks.MODULE``, as a framework's script does, records whether
its start-up hook is still there once the process group exists, and ends it
as the framework's callback would before its own hook; with --idle S it
never does (a script that imports the module and uses no callback): it
waits S seconds, in no collective and without a step, and the hook ends at
the process's exit.
Writes one JSON line per event.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> int:
    progress, fail_attempts = sys.argv[1], int(sys.argv[2])
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    def event(name: str, **kw: object) -> None:
        with open(progress, "a") as f:
            line = {"event": name, "rank": rank, "attempt": attempt, "pid": os.getpid()}
            f.write(json.dumps({**line, **kw, "t": time.time()}) + "\n")

    hook = None
    framework = sys.argv[sys.argv.index("--framework") + 1] if "--framework" in sys.argv else ""
    if framework:
        importlib.import_module(f"trainprobe.hooks.{framework}")
    elif "--no-hook" not in sys.argv:
        from trainprobe.hooks import LivenessProbeHook

        hook = LivenessProbeHook(interval_ms=200)
    if framework:
        from trainprobe.hooks.framework import startup as framework_startup

        event("start", watch=framework_startup._watch is not None)
    else:
        event("start")
    if "--init-sleep" in sys.argv:
        who, _, secs = sys.argv[sys.argv.index("--init-sleep") + 1].partition(":")
        if int(who) == rank and attempt == 0:
            event("init_sleep", seconds=float(secs))
            time.sleep(float(secs))
    t0 = time.monotonic()
    event("init_enter")
    timeout = timedelta(seconds=float(os.environ.get("PG_TIMEOUT_S", "60")))
    dist.init_process_group("gloo", timeout=timeout)
    event("init_done", init_s=time.monotonic() - t0)
    if framework:  # before the allreduce: no rank exits before every rank is here
        time.sleep(0.5)  # a reporter poll: the start-up phases end
        event("watch_kept", kept=framework_startup._watch is not None)
        if "--idle" in sys.argv:
            time.sleep(float(sys.argv[sys.argv.index("--idle") + 1]))
        else:
            framework_startup.end_startup_watch()  # the callback's hand-over
            event("watch_ended", ended=framework_startup._watch is None)
    t = torch.ones(1)
    dist.all_reduce(t)
    assert int(t.item()) == dist.get_world_size()
    if hook is not None:
        hook.on_step_end(1)
    event("step", value=int(t.item()))
    if rank == 1 and attempt < fail_attempts:
        event("fail")
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()
    event("done")
    if hook is not None:
        hook.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
