"""The plain parts of replicated runs: a replica group's job-wide identity, the
launcher's restart back-off, and the replicated example's changed lines."""

from __future__ import annotations

import difflib

import pytest

from tests.support import REPO
from trainprobe.hooks.report.identity import resolve_identity
from trainprobe.sidecar.cli.run.groups import Backoff, exit_code


def test_a_replica_groups_ranks_are_job_wide_from_their_first_hello(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # trainprobe run gives each group torchrun's env (RANK within the group) and
    # torchft's; two groups' rank 0 must not claim the same job rank in Hello.
    for k, v in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "REPLICA_GROUP_ID": "2",
        "NUM_REPLICA_GROUPS": "3",
        "TORCHFT_LIGHTHOUSE": "http://127.0.0.1:1",
        "TRAINPROBE_JOB_ID": "j",
    }.items():
        monkeypatch.setenv(k, v)
    ident = resolve_identity(ray_info=(None, {}))
    assert (ident.rank, ident.world_size, ident.local_rank) == (5, 6, 1)
    # torchft's own global rank for replica id "replica_2" (its trailing digits).
    from trainprobe.hooks.torchft import replica_rank

    assert replica_rank("replica_2", 1, 2) == 5
    # An explicit rank wins, as always; without a lighthouse nothing changes.
    assert resolve_identity(rank=0, ray_info=(None, {})).rank == 0
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE")
    assert resolve_identity(ray_info=(None, {})).rank == 1


def test_restarts_back_off_while_a_group_keeps_failing_and_not_after_a_long_run() -> None:
    b = Backoff(first_s=1.0, max_s=30.0, reset_s=60.0)
    # The first failure (an eviction, say) restarts at once; the next quick ones wait.
    assert [b.after(2.0) for _ in range(8)] == [0, 1, 2, 4, 8, 16, 30, 30]
    assert b.after(3600.0) == 0  # an evicted group that trained an hour rejoins at once
    assert b.after(5.0) == 1


def test_exit_status_of_a_signalled_group_is_the_shells() -> None:
    assert (exit_code(-9), exit_code(1), exit_code(0)) == (137, 1, 0)


def test_the_replicated_example_is_the_plain_one_with_three_changed_lines() -> None:
    # The count docs/RECOVERY.md gives: the code after each module docstring.
    def code(name: str) -> list[str]:
        text = (REPO / "examples" / name).read_text()
        return text[text.index('"""', 3) + 3 :].splitlines()

    plain, replicated = code("ddp_train.py"), code("ddp_replicated.py")
    changed = [ln for ln in difflib.ndiff(plain, replicated) if ln[:2] in ("+ ", "- ")]
    assert len(plain) == len(replicated)
    assert len(changed) == 6, changed  # 3 lines out, 3 lines in
