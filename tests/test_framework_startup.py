"""Importing a framework callback prepares torchrun's restarts and watches the start-up.

The HF Trainer and Lightning make the process group before any callback
exists; the import of ``trainprobe.hooks.transformers`` / ``.lightning`` is
the earliest place trainprobe runs (hooks/trainprobe/hooks/framework/startup.py).
Real torchrun, real gloo ranks of tests/workers/restart_init.py that only
import the callback's module and call a plain ``init_process_group``, a real
sidecar process.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.support import PYTHON, REPO, child_env, read_jsonl, short_tmpdir, sidecar

WORKER = REPO / "tests" / "workers" / "restart_init.py"


def run_worker(target: str, args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Two ranks of :data:`WORKER` under torchrun, reporting to ``target``."""
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return subprocess.run(
        [*cmd, *args],
        env=child_env(TRAINPROBE_TARGET=target, PG_TIMEOUT_S="60"),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("framework", ["transformers", "lightning"])
def test_importing_the_callback_module_gets_restarts_through_init_process_group(
    framework: str,
) -> None:
    """Three torchrun restarts, each through a plain init_process_group on
    torchrun's one shared store (before the fix: "Gloo connectFullMesh failed"
    or a hang there); on every attempt the start-up hook reported the phases,
    was still there past the process group, and ended with a Goodbye at the
    callback's hand-over."""
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    args = ["--max-restarts", "3", str(WORKER), str(progress), "3", "--framework", framework]
    with sidecar() as sc:
        run = run_worker(sc.target, args, timeout_s=280)
        assert run.returncode == 0, run.stderr[-4000:]
        events = read_jsonl(progress)
        inits = sorted((e["attempt"], e["rank"]) for e in events if e["event"] == "init_done")
        assert inits == [(a, r) for a in range(4) for r in range(2)]
        made = [e["watch"] for e in events if e["event"] == "start"]
        assert made == [True] * 8, made
        kept = [e["kept"] for e in events if e["event"] == "watch_kept"]
        assert kept == [True] * 8, kept
        ended = [e for e in events if e["event"] == "watch_ended"]
        assert len(ended) == 8 and all(e["ended"] for e in ended), ended
        rows = list(sc.status().workers)
        # The last attempt's two start-up sessions, ended by their Goodbye.
        last = {e["pid"] for e in events if e["event"] == "start" and e["attempt"] == 3}
        assert {(w.pid, w.state) for w in rows if w.pid in last} == {(p, "goodbye") for p in last}
        # A rank slower to import than its peer may be named (a verdict is
        # cheap), but nothing is killed.
        assert not [a for a in sc.incidents("action") if a.get("outcomes")], sc.incidents()


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_script_that_imports_the_callback_module_and_never_steps_is_never_killed() -> None:
    """The start-up hook is kept past the process group, and a script need
    not use the callback: its ranks wait 12 s without a step, past a 5 s
    ``startup_timeout_s``. The hook's Hello says ``startup_watch``: no rule
    without evidence judges it (before, rule ``startup`` named both ranks
    HUNG here, and killed them after the patience), and it ends with a
    Goodbye at the exit."""
    work = short_tmpdir()
    progress = work / "progress.jsonl"
    args = [str(WORKER), str(progress), "0", "--framework", "lightning", "--idle", "12"]
    with sidecar("--startup-timeout-s", "5", "--hang-patience-s", "1") as sc:
        run = run_worker(sc.target, args, timeout_s=180)
        assert run.returncode == 0, run.stderr[-4000:]
        events = read_jsonl(progress)
        kept = sorted(e["rank"] for e in events if e["event"] == "watch_kept" and e["kept"])
        assert kept == [0, 1], events
        assert sorted(e["rank"] for e in events if e["event"] == "done") == [0, 1]
        assert sc.incidents() == [] and sc.incidents("action") == [], sc.incidents()
        pids = {e["pid"] for e in events if e["event"] == "start"}
        rows = list(sc.status().workers)
        assert {(w.pid, w.state) for w in rows if w.pid in pids} == {(p, "goodbye") for p in pids}


HANDS_OVER = """
import torch.distributed as dist
import trainprobe.hooks.lightning
from trainprobe.hooks import LivenessProbeHook
from trainprobe.hooks.framework import startup as fs

from torch.nn.parallel import DistributedDataParallel as DDP

init = DDP.__init__
watch, patched = fs._watch, hasattr(init, "__wrapped__")
barrier = dist.barrier is dist.distributed_c10d.barrier  # a barrier is never watched
hook = LivenessProbeHook(rank=0, world_size=2)
print(watch is not None, watch.startup_watch, patched, watch._closed, fs._watch is None,
      barrier, DDP.__init__ is init.__wrapped__, hook.startup_watch)
hook.close()
"""


def test_a_plain_hook_made_in_the_process_ends_the_start_up_hook_first() -> None:
    """A script that imports the callback's module (for the restart fix) but
    makes its own LivenessProbeHook: one hook a process, the start-up hook
    ends and its collectives' patches are undone."""
    work = short_tmpdir()
    env = child_env(TORCHELASTIC_RUN_ID="handover", RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")
    env["TRAINPROBE_TARGET"] = f"unix://{work}/none.sock"
    out = subprocess.run(
        [PYTHON, "-c", HANDS_OVER], env=env, capture_output=True, text=True, timeout=150
    )
    assert out.stdout.split("\n")[0] == "True True True True True True True False", (
        out.stdout + out.stderr
    )


@pytest.mark.parametrize("framework", ["transformers", "lightning"])
def test_importing_the_callback_module_outside_torchrun_changes_nothing(framework: str) -> None:
    code = (
        f"import trainprobe.hooks.{framework}\n"
        "import sys, threading\n"
        "r = sys.modules['torch.distributed.rendezvous']  # the attribute is a function\n"
        "from trainprobe.hooks.framework import startup as fs\n"
        "marked = getattr(r._rendezvous_handlers['env'], '_trainprobe_restart_prefix', False)\n"
        "threads = [t.name for t in threading.enumerate() if t.name.startswith('trainprobe')]\n"
        "print(fs._watch is None, marked, threads)\n"
    )
    # A restarted torchrun attempt's variables, but one process: nothing to watch,
    # and the prefix needs torchrun's agent store.
    env = child_env(RANK="0", WORLD_SIZE="1", TORCHELASTIC_RESTART_COUNT="1")
    env["TRAINPROBE_TARGET"] = f"unix://{short_tmpdir()}/none.sock"
    out = subprocess.run(
        [PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split("\n")[0] == "True False []", out.stdout + out.stderr


SPAWNS = """
import multiprocessing as mp
import trainprobe.hooks.transformers
from trainprobe.hooks.framework import startup as fs


def child(q):
    q.put(fs._watch is None)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print(fs._watch is not None, q.get(timeout=100))
    p.join()
"""


def test_a_spawned_child_of_a_rank_makes_no_start_up_hook() -> None:
    """A DataLoader worker of the spawn method imports the script again, with
    the rank's environment: only the rank itself reports."""
    work = short_tmpdir()
    script = work / "spawns.py"
    script.write_text(SPAWNS)
    env = child_env(TORCHELASTIC_RUN_ID="spawn-test", RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")
    env["TRAINPROBE_TARGET"] = f"unix://{work}/none.sock"
    out = subprocess.run(
        [PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=150, check=True
    )
    assert out.stdout.split("\n")[0] == "True True", out.stdout + out.stderr
