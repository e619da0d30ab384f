"""End to end: gloo ranks with watch_ddp report sync latency and sequence numbers
to a real sidecar, which finds collectives stuck behind a slow rank."""

from __future__ import annotations

import json
import re

import pytest
import torch

from tests.support import Workers, ctl, short_tmpdir, sidecar, wait_for

pytestmark = pytest.mark.slow

FAST_STEPS = ["--step-s", "0.02", "--interval-ms", "100"]


def test_latencies_and_sequence_numbers_reach_the_sidecar() -> None:
    with (
        sidecar() as sc,
        Workers(
            3,
            sc.target,
            short_tmpdir(),
            job_id="sync3",
            args=[
                "--steps",
                "30",
                *FAST_STEPS,
                "--watch-ddp",
                "--bucket-cap-mb",
                "0.001",
                "--user-collective-every",
                "5",
            ],
        ) as w,
    ):
        assert w.wait(120) == [0, 0, 0], w.log_text(0)
        assert all(e["watched"] for e in w.events("start"))
        workers = sorted(sc.status("sync3").workers, key=lambda s: s.rank)
        assert [s.rank for s in workers] == [0, 1, 2]
        issued = set()
        for s in workers:
            (group,) = s.groups
            assert group.group == "default"
            # The final report is sent after the last collective completed.
            assert group.issued == group.completed >= 30 + 30 // 5
            assert group.oldest_inflight_start_mono_ns == 0
            assert 0 < s.sync_p50_s <= s.sync_max_s < 10
            issued.add(group.issued)
        assert len(issued) == 1, "every rank issued the same collectives"
        out = ctl("status", "--target", sc.target, "--json", check=True).stdout
        rows = json.loads(out)["workers"]
        assert {int(g["issued"]) for r in rows for g in r["groups"]} == issued
        assert all("completed" in g and "inflightSeq" in g for r in rows for g in r["groups"])
        table = ctl("status", "--target", sc.target, check=True).stdout
        # The default (100-column) table heads it SYNC; the value is p50/max.
        assert " SYNC " in table.splitlines()[1]
        assert re.search(r"\d+\.\d/\d+\.\dms", table), table


def test_peers_of_a_slow_rank_show_a_growing_inflight_age_and_are_found() -> None:
    """Rank 1 sleeps 6 s before a backward; ranks 0 and 2 wait in its allreduce."""
    with (
        sidecar("--sync-timeout-s", "2", "--sync-latency-s", "3", "--on-hung", "observe") as sc,
        Workers(
            3,
            sc.target,
            short_tmpdir(),
            job_id="slow1",
            args=[
                "--steps",
                "40",
                *FAST_STEPS,
                "--watch-ddp",
                "--delay-backward-rank",
                "1",
                "--delay-backward-at",
                "10",
                "--delay-backward-s",
                "6",
            ],
        ) as w,
    ):
        wait_for(lambda: w.events("delay"), 60, what="rank 1 to start its delay")

        def age(rank: int) -> float:
            return next(s.inflight_age_s for s in sc.status("slow1").workers if s.rank == rank)

        first = wait_for(lambda: age(0) > 0.5 and age(0), 10, what="an in-flight collective")
        later = wait_for(lambda: age(0) > first + 0.5 and age(0), 10, what="the age to grow")
        assert later > first
        assert age(1) == 0.0, "the slow rank itself waits in no collective"

        inc = sc.wait_incident(lambda r: r["rule"] == "sync_inflight", timeout_s=20)
        assert inc["verdict"] == "HUNG"
        assert 1 not in inc["ranks"] and set(inc["ranks"]) <= {0, 2}
        ev = inc["evidence"][str(inc["ranks"][0])]
        assert ev["group"] == "default" and ev["op"] == "allreduce"
        assert ev["seq"] > ev["completed"] >= 9  # nine steps' buckets finished before
        assert 2.0 <= inc["detection_latency_s"] < 2.0 + 1.5

        # Once rank 1 catches up the waits end with a ~6 s latency: rank 1's
        # doing, not theirs, so no DEGRADED (sync_latency) names ranks 0 and 2.
        assert w.wait(120) == [0, 0, 0]
        assert not [i for i in sc.incidents() if i["rule"] == "sync_latency"]
        # A later rank's verdict joins the open hang episode as an incident_update.
        records = sc.incidents("incident") + sc.incidents("incident_update")
        found = {r for i in records if i.get("rule") == "sync_inflight" for r in i["ranks"]}
        assert found == {0, 2}
        assert not [i for i in sc.incidents() if i["rule"] in ("stall", "exit")]


def test_gradients_are_unchanged_by_the_hook_at_world_size_three() -> None:
    """World size 3 is where dividing and multiplying by 1/3 differ in the last bit."""
    tmp = short_tmpdir()
    # Composition with a user's hook keeps its results too: tests/test_ddp_watch.py.
    runs = {"plain": [], "watched": ["--watch-ddp"]}
    grads: dict[str, list[list[torch.Tensor]]] = {}
    with sidecar() as sc:
        for name, flags in runs.items():
            prefix = tmp / name
            with Workers(
                3,
                sc.target,
                tmp,
                job_id=f"grads-{name}",
                args=["--steps", "6", "--step-s", "0", "--save-grads", str(prefix), *flags],
            ) as w:
                assert w.wait(120) == [0, 0, 0], w.log_text(0)
            grads[name] = [torch.load(f"{prefix}-rank{r}.pt") for r in range(3)]
        watched = sc.status("grads-watched").workers
        assert len(watched) == 3 and all(s.groups[0].completed >= 6 for s in watched)

    def same(a: str, b: str) -> bool:
        return all(
            torch.equal(x, y)
            for ra, rb in zip(grads[a], grads[b], strict=True)
            for x, y in zip(ra, rb, strict=True)
        )

    assert same("plain", "watched")


def test_a_straggler_shows_as_arrival_lag_in_status_json() -> None:
    """Rank 1 sleeps 1.5 s before one backward: it enters that step's allreduces late."""
    with (
        sidecar("--on-degraded", "observe", "--on-hung", "observe") as sc,
        Workers(
            2,
            sc.target,
            short_tmpdir(),
            job_id="lag2",
            args=[
                "--steps",
                "30",
                *FAST_STEPS,
                "--watch-ddp",
                "--delay-backward-rank",
                "1",
                "--delay-backward-at",
                "10",
                "--delay-backward-s",
                "1.5",
            ],
        ) as w,
    ):
        assert w.wait(120) == [0, 0], w.log_text(0)
        out = ctl("status", "--target", sc.target, "--json", check=True).stdout
        lag = {int(r.get("rank", 0)): r["arrivalLag"] for r in json.loads(out)["workers"]}
        # Every collective of the 30 steps was compared on both ranks.
        assert int(lag[0]["count"]) >= 30 and int(lag[1]["count"]) >= 30
        assert 1.2 <= lag[1]["maxS"] < 3.0, lag
        # Rank 0 was never the late one by more than scheduling noise on a busy machine.
        assert lag[0]["maxS"] < 0.5 * lag[1]["maxS"], lag
        assert lag[1]["p50S"] < 0.5 and int(lag[1]["missed"]) == 0
        assert lag[1]["group"] == "default"
