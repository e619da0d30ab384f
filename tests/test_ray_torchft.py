"""Ray Train with TorchftConfig: a real local Ray, the per-node sidecar with its
shipped defaults, 2 workers that are each their own torchft replica group
(examples/ray_torchft_job.py, trainprobe's lighthouse settings). One worker
sleeps inside its step (ambiguous: evicted after the replicated patience) or
is SIGSTOPped there (definitive: evicted at once, SIGKILLed before ``ray.kill``,
which a stopped process cannot answer): the sidecar evicts it through Ray, Ray
Train replaces that replica group alone, the other worker never restarts (one
``train_func``, one pid, its committed steps never go back), and both end with
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


@pytest.mark.parametrize("fault", ["sleep", "stop"])
def test_an_evicted_replica_group_is_replaced_alone(fault: str) -> None:
    with ray_environment() as workdir:
        ray = init_local_ray(num_cpus=2)
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
                {"fault": fault, "fault_rank": 1, "steps": 200, "progress": str(progress)},
                str(workdir / "storage"),
                f"ft-evict-{fault}",
            )
            trainer.fit()
            rows = read_jsonl(progress)
            starts = [r for r in rows if r["event"] == "start"]
            done = {r["rank"]: r for r in rows if r["event"] == "done"}
            onset = next(r for r in rows if r["event"] == "fault")
            assert [r["rank"] for r in starts].count(0) == 1, starts  # never restarted
            begins = [r["rank"] for r in rows if r["event"] == "begin"]
            assert begins.count(0) == 1, begins  # Ray Train entered its train_func once
            assert [r["rank"] for r in starts].count(1) == 2, starts  # replaced once
            assert done[0]["pid"] == next(r["pid"] for r in starts if r["rank"] == 0)
            assert done[1]["pid"] != onset["pid"]
            assert done[0]["params"] == pytest.approx(done[1]["params"], abs=1e-6)
            survivor_steps = [r for r in rows if r["event"] == "step" and r["rank"] == 0]
            assert {r["pid"] for r in survivor_steps} == {done[0]["pid"]}
            steps = [r["step"] for r in survivor_steps]
            assert steps == sorted(set(steps)), steps  # no step taken twice: no reload
            resumed = next(r for r in survivor_steps if r["t"] > onset["t"] + 0.2)
            replaced = next(
                r for r in rows if r["event"] == "step" and r["rank"] == 1 and r["t"] > onset["t"]
            )
            print(
                f"ray torchft {fault}: survivor {resumed['t'] - onset['t']:.1f}s, "
                f"replacement stepping {replaced['t'] - onset['t']:.1f}s after onset"
            )
            records = read_jsonl(Path(placed.incident_log))
            evicts = [r for r in records if r.get("type") == "action" and r["action"] == "evict"]
            assert len(evicts) == 1, records
            assert evicts[0]["evicted_replicas"] == ["train_1"]
            assert set(evicts[0]["outcomes"]) == {"1"}
            assert evicts[0]["outcomes"]["1"]["method"] == "ray.kill"
            # A stopped worker cannot exit through Ray: it is SIGKILLed first.
            first = evicts[0]["outcomes"]["1"].get("signalled_first")
            assert first == ("SIGKILL" if fault == "stop" else None), evicts[0]
            kills = [r for r in records if r.get("type") == "action" and r["action"] != "evict"]
            assert kills == []
            if fault == "stop":
                # The Ray node's sidecar read its silent local worker's /proc state
                # (core/hang/stopped.py): the episode opened on 'stopped', not on a clock.
                opened = next(r for r in records if r.get("type") == "incident")
                assert (opened["rule"], opened["ranks"]) == ("stopped", [1]), opened
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
