"""Ray Train with TorchftConfig: a real local Ray, the per-node sidecar with its
shipped defaults, 2 (or 4) workers that are each their own torchft replica group
(examples/ray_torchft_job.py, trainprobe's lighthouse settings). One worker
sleeps inside its step (ambiguous: evicted after the replicated patience) or
is SIGSTOPped there (definitive: evicted at once, SIGKILLed before ``ray.kill``,
which a stopped process cannot answer): the sidecar evicts it through Ray, Ray
Train replaces that replica group alone, the others never restart (one
``train_func``, one pid, their committed steps never go back), and all end with
equal parameters. How fast the survivor goes on is measured by
bench/bench_torchft.py --sections ray, not here.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from tests.ray_support import EXAMPLES, WORKERS, init_local_ray, ray_environment
from tests.support import read_jsonl

pytest.importorskip("torchft")
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.parametrize(
    ("fault", "workers", "hung"),
    [("sleep", 2, 1), ("stop", 2, 1), ("stop", 4, 2)],
    ids=["sleep", "stop", "stop-4-groups"],
)
def test_an_evicted_replica_group_is_replaced_alone(fault: str, workers: int, hung: int) -> None:
    """With 4 groups the hung one sits in the middle of gloo's ring: survivors on
    both sides of it, and one that is next to neither side, all go on."""
    with ray_environment() as workdir:
        ray = init_local_ray(num_cpus=max(2, workers))
        from trainprobe.sidecar import load_settings
        from trainprobe.sidecar.ray import start_sidecars, stop_sidecars

        try:
            (placed,) = start_sidecars(
                load_settings(env={}, cli={"state_dir": str(workdir / "state")})
            )
            if str(EXAMPLES) not in sys.path:
                sys.path.insert(0, str(EXAMPLES))
            import ray_torchft_job

            progress = workdir / "progress.jsonl"
            trainer = ray_torchft_job.make_trainer(
                {"fault": fault, "fault_rank": hung, "steps": 200, "progress": str(progress)},
                str(workdir / "storage"),
                f"ft-evict-{fault}-{workers}",
                workers=workers,
            )
            trainer.fit()
            rows = read_jsonl(progress)
            starts = [r for r in rows if r["event"] == "start"]
            done = {r["rank"]: r for r in rows if r["event"] == "done"}
            onset = next(r for r in rows if r["event"] == "fault")
            assert onset["rank"] == hung, onset
            begins = [r["rank"] for r in rows if r["event"] == "begin"]
            survivors = [r for r in range(workers) if r != hung]
            for rank in survivors:
                assert [r["rank"] for r in starts].count(rank) == 1, starts  # never restarted
                assert begins.count(rank) == 1, begins  # Ray Train entered train_func once
                assert done[rank]["pid"] == next(r["pid"] for r in starts if r["rank"] == rank)
                assert done[rank]["params"] == pytest.approx(done[hung]["params"], abs=1e-6)
                steps_of = [r for r in rows if r["event"] == "step" and r["rank"] == rank]
                assert {r["pid"] for r in steps_of} == {done[rank]["pid"]}
                steps = [r["step"] for r in steps_of]
                assert steps == sorted(set(steps)), steps  # no step taken twice: no reload
            assert [r["rank"] for r in starts].count(hung) == 2, starts  # replaced once
            assert done[hung]["pid"] != onset["pid"]
            survivor_steps = [r for r in rows if r["event"] == "step" and r["rank"] == 0]
            resumed = next(r for r in survivor_steps if r["t"] > onset["t"] + 0.2)
            replaced = next(
                r
                for r in rows
                if r["event"] == "step" and r["rank"] == hung and r["t"] > onset["t"]
            )
            print(
                f"ray torchft {fault}: survivor {resumed['t'] - onset['t']:.1f}s, "
                f"replacement stepping {replaced['t'] - onset['t']:.1f}s after onset"
            )
            records = read_jsonl(Path(placed.incident_log))
            evicts = [r for r in records if r.get("type") == "action" and r["action"] == "evict"]
            assert len(evicts) == 1, records
            assert evicts[0]["evicted_replicas"] == [f"train_{hung}"]
            assert set(evicts[0]["outcomes"]) == {str(hung)}
            outcome = evicts[0]["outcomes"][str(hung)]
            if workers == 2:
                assert outcome["method"] == "ray.kill", evicts[0]
            else:
                # With 4 workers on 2 cores Ray was not always reachable in time (1 run
                # of 2 here): the eviction then goes by signals, and says why.
                assert outcome["method"] == "ray.kill" or (
                    outcome.get("fallback") == "signal" and outcome.get("ray_error")
                ), evicts[0]
            if outcome["method"] == "ray.kill":
                # A stopped worker cannot exit through Ray: it is SIGKILLed first.
                first = outcome.get("signalled_first")
                assert first == ("SIGKILL" if fault == "stop" else None), evicts[0]
            kills = [r for r in records if r.get("type") == "action" and r["action"] != "evict"]
            assert kills == []
            if fault == "stop":
                # The Ray node's sidecar read its silent local worker's /proc state
                # (core/hang/stopped.py): the episode opened on 'stopped', not on a clock.
                opened = next(r for r in records if r.get("type") == "incident")
                assert (opened["rule"], opened["ranks"]) == ("stopped", [hung]), opened
        finally:
            with contextlib.suppress(Exception):
                stop_sidecars()
            ray.shutdown()


def test_ray_train_replica_groups_name_each_workers_replica_without_a_manager() -> None:
    # The hook under Ray Train + TorchftConfig takes its replica group from Ray Train
    # itself; once it watches a Manager, the Manager's replica id replaces it.
    with ray_environment() as workdir:
        ray = init_local_ray(num_cpus=2)
        try:
            from ray.train import RunConfig, ScalingConfig
            from ray.train.torch import TorchTrainer
            from ray.train.v2.torch.torchft_config import TorchftConfig

            if str(WORKERS) not in sys.path:
                sys.path.insert(0, str(WORKERS))
            import ray_replica_identity

            out = workdir / "identity.jsonl"
            TorchTrainer(
                ray_replica_identity.train_func,
                train_loop_config={"out": str(out)},
                scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                torch_config=TorchftConfig(lighthouse_kwargs={"min_replicas": 1}, backend="gloo"),
                run_config=RunConfig(name="ft-identity", storage_path=str(workdir / "storage")),
            ).fit()
            rows = {(r["source"], r["rank"]): r for r in read_jsonl(out)}
            for rank in (0, 1):
                ray_row, mgr_row = rows[("ray", rank)], rows[("manager", rank)]
                assert ray_row["replica"] == f"ray_replica_{rank}", ray_row
                assert (ray_row["group_rank"], ray_row["group"]) == (0, 1)
                assert mgr_row["replica"] == f"train_{rank}", mgr_row
                # The job-wide rank stays Ray Train's world rank throughout.
                assert ray_row["hook_rank"] == mgr_row["hook_rank"] == rank
        finally:
            ray.shutdown()
