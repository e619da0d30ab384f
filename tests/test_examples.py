"""The user example, examples/ddp_train.py, works as its docstring says: real
gloo ranks and a real sidecar; a hung rank is named, with the line it is stuck
at, and killed alone; a healthy run with checkpoint phases finishes untouched."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support import PYTHON, REPO, Workers, child_env, short_tmpdir, sidecar

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "ddp_train.py"


def test_a_rank_hanging_in_the_example_is_named_where_it_is_stuck_and_killed() -> None:
    with (
        sidecar("--stall-timeout-s", "3", "--hang-patience-s", "0") as sc,
        Workers(
            2,
            sc.target,
            short_tmpdir(),
            job_id="example",
            args=["--steps", "400", "--step-s", "0.02", "--hang-rank", "1", "--hang-at", "20"],
            script=EXAMPLE,
        ) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "example", timeout_s=180)
        d = inc["diagnosis"]
        assert d["culprits"] == [1] and inc["targets"] == [1], d
        where = d["stacks"]["1"]["where"]  # the demo's fault, shared by both DDP examples
        assert where.startswith("_faults.py:") and where.endswith(" in hang"), where
        assert w.events("hang")[0]["rank"] == 1
        assert w.wait(60)[1] is not None  # killed


def test_a_healthy_run_of_the_example_finishes_with_no_incident() -> None:
    with (
        sidecar() as sc,  # the shipped defaults
        Workers(
            2,
            sc.target,
            short_tmpdir(),
            job_id="example-ok",
            args=["--steps", "60", "--step-s", "0.02", "--checkpoint-every", "20"],
            script=EXAMPLE,
        ) as w,
    ):
        assert w.wait(180) == [0, 0], (w.log_text(0), w.log_text(1))
        assert sc.incidents(job="example-ok") == []


@pytest.mark.timeout(420)
def test_make_demo_tells_the_replicated_story() -> None:
    """What `make demo` runs (the Makefile's demo target), as a new user sees it:
    exit 0 only when every moment of the story happened (the hang, the
    eviction, the survivor's next step in the same process, the rejoin) and
    both replicas end with equal parameters."""
    make = (REPO / "Makefile").read_text()
    target = make[make.index("\ndemo:") :].split("\n\n", 1)[0]
    assert "examples/replicated_demo.py" in target, target
    r = subprocess.run(
        [PYTHON, str(REPO / "examples" / "replicated_demo.py")],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    named = r"the sidecar names the culprit: .*\brank 1\b.* stuck at _faults\.py:\d+ in hang"
    assert re.search(named, out), out
    assert "same pid" in out and "never restarted" in out, out
    assert "fetched parameters and optimizer state from replica 0" in out, out
    hung = re.search(r"hangs in step (\d+)", out)
    rejoined = re.search(r"trains on with it at step (\d+)", out)
    assert hung and rejoined and int(rejoined[1]) > int(hung[1]), out
    assert "with equal parameters" in out, out
