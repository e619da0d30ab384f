"""The Hugging Face callback end to end: a real sidecar, a real two-process
``Trainer``/``Seq2SeqTrainer`` job under torchrun on CPU (tests/hf_worker.py:
a one-layer GPT-2 built from a config, random tokens), real signals.

The job's script has one trainprobe line, ``callbacks=[LivenessProbeCallback()]``.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.framework_support import hung_rank_killed_alone, phases_until_exit, session_job
from tests.support import (
    PYTHON,
    REPO,
    free_port,
    read_jsonl,
    short_tmpdir,
    sidecar,
    wait_for,
)

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow

WORKER = REPO / "tests" / "hf_worker.py"


@contextlib.contextmanager
def torchrun_job(target: str, job_id: str, *args: str) -> Iterator[tuple[subprocess.Popen, Path]]:
    """``torchrun --nproc-per-node 2 hf_worker.py ARGS``; yields (torchrun, progress file)."""
    workdir = short_tmpdir("tp-hf-")
    progress = workdir / "progress.jsonl"
    cmd = [
        *(PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2"),
        *("--master-addr", "127.0.0.1", "--master-port", str(free_port())),
        *(str(WORKER), "--progress", str(progress), "--output-dir", str(workdir / "out"), *args),
    ]
    with session_job(cmd, workdir, target, job_id) as proc:
        yield proc, progress


def test_a_hung_rank_is_named_and_killed_alone() -> None:
    """Rank 1 sleeps in training_step 15 (before its backward); rank 0 waits in the allreduce."""
    with (
        sidecar("--sync-timeout-s", "2", "--stall-timeout-s", "8", "--hang-patience-s", "0") as sc,
        torchrun_job(sc.target, "hf-hang", "--hang-rank", "1", "--hang-at", "15") as (proc, _),
    ):
        # Named through the DDP wrapper the callback found and watched by itself.
        out = hung_rank_killed_alone(sc, "hf-hang", "hf_worker.py", timeout_s=100)
        assert out["exited"] and out["signals"][:2] == ["SIGTERM", "SIGCONT"], out
        assert proc.wait(60) != 0  # torchrun ends the job once a worker failed
        assert len(sc.incidents()) == 1


@pytest.mark.parametrize("trainer", ["trainer", "seq2seq"])
def test_long_evaluation_and_checkpoints_are_never_stalls(trainer: str) -> None:
    """Each lasts longer than the stall threshold (2 s)."""
    args = [
        *("--trainer", trainer, "--max-steps", "20", "--step-s", "0.05"),
        *("--eval-every", "10", "--eval-batches", "3", "--eval-batch-s", "1.0"),
        *("--save-every", "10", "--save-s", "3"),
    ]
    job = f"hf-long-{trainer}"
    with (
        sidecar("--stall-timeout-s", "2", "--sync-timeout-s", "2") as sc,
        torchrun_job(sc.target, job, *args) as (proc, progress),
    ):
        phases = phases_until_exit(sc, job, proc, 110)
        assert proc.wait(5) == 0
        rows = read_jsonl(progress)
        assert sorted(r["rank"] for r in rows if r["event"] == "done") == [0, 1]
        # The phases really were longer than the threshold, so without them
        # the stall or sync rule would have fired.
        evals = [r for r in rows if r["event"] == "evaluation"]
        assert len(evals) == 4 and all(r["seconds"] >= 2.5 for r in evals), evals
        saves = [r for r in rows if r["event"] == "checkpoint" and r["rank"] == 0]
        assert len(saves) == 2 and all(r["seconds"] >= 2.5 for r in saves), saves
        assert {"evaluation", "checkpoint"} <= phases, phases
        assert sc.incidents() == [], sc.incidents()
        # train() ended with a Goodbye: nothing for the sidecar to judge afterwards
        # (each rank's start-up hook, made at the callback module's import under
        # torchrun, said one too, once the process group existed).
        wait_for(lambda: sc.log_text().count("stream ended: goodbye") == 4, 10, what="Goodbyes")
