"""The user example, examples/ddp_train.py, works as its docstring says: real
gloo ranks and a real sidecar; a hung rank is named, with the line it is stuck
at, and killed alone; a healthy run with checkpoint phases finishes untouched."""

from __future__ import annotations

import pytest

from tests.support import REPO, Workers, short_tmpdir, sidecar

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
        where = d["stacks"]["1"]["where"]
        assert where.startswith("ddp_train.py:") and where.endswith(" in hang"), where
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
        assert [r for r in sc.incidents() if r.get("job_id") == "example-ok"] == []
