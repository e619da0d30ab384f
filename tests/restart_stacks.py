"""The documented stacks under ``torchrun --max-restarts``, for tests and bench/bench_restart.py.

Each stack is its own worker: the plain script (examples/torchrun_train.py),
the Hugging Face Trainer with our callback (tests/hf_worker.py) and Lightning
with our callback, strategy ddp (tests/lightning_worker.py). All three take
``--hang-rank R --hang-at S --hang-how sleep|stop`` (first attempt only),
checkpoint every ``CKPT_EVERY`` steps, resume from the last checkpoint, and
write JSON lines to ``--progress``: ``start`` (attempt, pid, resumed_from),
``step`` (attempt, step), ``hang`` (pid, step) and ``done`` (attempt, step).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import PYTHON, REPO, child_env

__all__ = ["CKPT_EVERY", "HANG_AT", "STACKS", "STEPS", "stack_args", "torchrun"]

STEPS, HANG_AT, CKPT_EVERY = 30, 13, 5
STACKS = {
    "plain": REPO / "examples" / "torchrun_train.py",
    "hf": REPO / "tests" / "hf_worker.py",
    "lightning": REPO / "tests" / "lightning_worker.py",
}


def stack_args(
    stack: str, work: Path, progress: Path, steps: int = STEPS, step_s: float = 0.05
) -> list[str]:
    """The stack's script and its arguments: ``steps`` steps, a checkpoint every 5."""
    if stack == "plain":
        own = ["--ckpt-dir", str(work / "ckpt"), "--steps", str(steps)]
        own += ["--ckpt-every", str(CKPT_EVERY)]
    elif stack == "hf":
        own = ["--output-dir", str(work / "out"), "--max-steps", str(steps)]
        own += ["--save-every", str(CKPT_EVERY), "--resume"]
    else:
        own = ["--workdir", str(work), "--max-steps", str(steps)]
        own += ["--ckpt-every", str(CKPT_EVERY), "--resume"]
    return [str(STACKS[stack]), "--progress", str(progress), *own, "--step-s", str(step_s)]


def torchrun(
    target: str, script_args: list[str], restarts: int = 1, timeout_s: float = 200
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node 2 --max-restarts N``, hooks aimed at ``target``."""
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["--max-restarts", str(restarts), *script_args]
    env = child_env(TRAINPROBE_TARGET=target, TOKENIZERS_PARALLELISM="false")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
