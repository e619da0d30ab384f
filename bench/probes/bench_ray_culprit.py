"""Onset to a named culprit across nodes, on a 2-node ``ray.cluster_utils.Cluster``.

    PYTHONPATH=proto:hooks:sidecar python bench/probes/bench_ray_culprit.py [--trials 3]
        [--sync-timeout-s 2] [--sync-interval-ms 200] [--json OUT]

One local cluster of two Ray nodes with a trainprobe sidecar actor on each.
Each trial runs a new job of three gloo ranks as Ray actors (tests/workers/ddp_worker.py
with ``--watch-ddp``): ranks 0 and 1 on the head node, rank 2 on the other.
Rank 2 sleeps inside a random step. The head node's sidecar detects the hang
(its ranks wait in the allreduce: ``sync_inflight``) and names rank 2 through
the job's coordinator; the other node's sidecar follows the episode, reads
rank 2's stacks and kills it through Ray. Onset is the wall time rank 2 logged
just before sleeping; every other time is an incident's or action's record
(wall clock, one machine). Reported per trial: named (the head node's
incident), followed (the other node's incident), + where (its stacks read),
killed (the kill through Ray done).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.ray_support import ray_environment  # noqa: E402
from tests.support import free_port, read_jsonl, wait_for  # noqa: E402


class Rank:
    """A training process as a Ray actor: tests/workers/ddp_worker.py's main, in this actor."""

    def train(self, env: dict[str, str], argv: list[str]) -> int:
        os.environ.update(env)
        import ddp_worker

        return ddp_worker.main(argv)


def trial(ray: Any, nodes: dict[int, str], sidecars: dict[str, Any], workdir: Path, i: int,
          hang_at: int) -> dict[str, Any]:  # fmt: skip
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    job = f"bench-{i}-{time.monotonic_ns()}"
    progress = workdir / f"{job}.jsonl"
    remote = ray.remote(num_cpus=0)(Rank)
    port = str(free_port())
    argv = [
        "--steps", "100000", "--step-s", "0.05", "--interval-ms", "100", "--watch-ddp",
        "--hang-rank", "2", "--hang-at", str(hang_at), "--after-error", "sleep",
        "--progress", str(progress),
    ]  # fmt: skip
    actors = []
    for r, node in nodes.items():
        a = remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote()
        env = {
            "RANK": str(r), "WORLD_SIZE": "3", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port, "TRAINPROBE_JOB_ID": job, "GLOO_SOCKET_IFNAME": "lo",
        }  # fmt: skip
        a.train.remote(env, argv)
        actors.append(a)

    def records(node: str, kind: str) -> list[dict[str, Any]]:
        rows = ray.get(sidecars[node].incidents.remote())
        return [r for r in rows if r.get("type") == kind and r.get("job_id") == job]

    head, other = nodes[0], nodes[2]
    first = wait_for(lambda: records(head, "incident"), 300, 0.2, "head incident")[0]
    second = wait_for(lambda: records(other, "incident"), 60, 0.1, "other incident")[0]
    kill = wait_for(lambda: records(other, "action"), 60, 0.1, "kill")[0]
    onset = next(e["t"] for e in read_jsonl(progress) if e.get("event") == "hang")
    wait_for(lambda: records(head, "action"), 60, 0.2, "sweep")  # ranks 0, 1 gone too
    for a in actors:
        ray.kill(a)
    d = second["diagnosis"]
    return {
        "named_s": first["time"] - onset,
        "named_rank": first["diagnosis"]["culprits"],
        "kind": first["diagnosis"]["kind"],
        "followed_s": second["time"] - onset,
        "where_s": second["time"] - onset + d["stacks_s"],
        "where": d["where"].get("2", ""),
        "stacks_method": d["stacks"]["2"]["method"],
        "killed_s": second["time"] - onset + d["stacks_s"] + kill["outcomes"]["2"]["seconds"],
        "kill_method": kill["outcomes"]["2"]["method"],
        "detected_by_head_rule": first["rule"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--sync-timeout-s", type=float, default=2.0)
    p.add_argument("--sync-interval-ms", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="")
    args = p.parse_args()
    rng = random.Random(args.seed)
    results = []
    with ray_environment() as workdir:
        import ray
        from ray.cluster_utils import Cluster

        from trainprobe.sidecar import load_settings
        from trainprobe.sidecar.ray import node_sidecar, start_sidecars, stop_sidecars
        from trainprobe.sidecar.ray.coordinator import stop_coordinators

        c = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "dashboard_port": free_port()}
        )
        try:
            c.add_node(num_cpus=1)
            c.wait_for_nodes()
            ray.init(address=c.address, log_to_driver=False)
            settings = load_settings(
                env={},
                cli={
                    "state_dir": str(workdir / "state"),
                    "sync_timeout_s": str(args.sync_timeout_s),
                    "stall_timeout_s": "60",
                    "job_sync_interval_ms": str(args.sync_interval_ms),
                    "job_kill_grace_s": "2",
                },
            )
            placed = start_sidecars(settings)
            head = c.head_node.node_id
            (other,) = [s.node_id for s in placed if s.node_id != head]
            nodes = {0: head, 1: head, 2: other}
            sidecars = {n: node_sidecar(n) for n in (head, other)}
            for i in range(args.trials):
                r = trial(ray, nodes, sidecars, workdir, i, rng.randint(25, 50))
                results.append(r)
                print(f"trial {i}: {r}", flush=True)
        finally:
            stop_sidecars()
            stop_coordinators()
            ray.shutdown()
            c.shutdown()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)

    summary = {
        "trials": args.trials,
        "sync_timeout_s": args.sync_timeout_s,
        "job_sync_interval_ms": args.sync_interval_ms,
        "all_named": all(r["named_rank"] == [2] for r in results),
        **{f"median_{k}": med(k) for k in ("named_s", "followed_s", "where_s", "killed_s")},
        **{f"max_{k}": max(r[k] for r in results) for k in ("named_s", "where_s", "killed_s")},
        "trial_results": results,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "trial_results"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
