"""trainprobe on Ray Train: a rank hangs, trainprobe kills it through Ray within
seconds, Ray Train resumes from the latest checkpoint, and the run finishes.

Everything runs on an embedded local Ray (``ray.init``): no cluster to set up.

1. ``start_sidecars()`` puts one trainprobe sidecar on the (single) Ray node,
   as a detached actor listening on the node's socket.
2. A ``TorchTrainer`` runs 2 CPU workers (gloo) of ``examples/ray_train_job.py``;
   each creates a ``LivenessProbeHook`` with no arguments, finds the node's
   sidecar by itself, and checkpoints inside ``hook.phase("checkpoint")``.
3. Rank 1 hangs inside step ``--hang-at``. Ray Train alone would not notice:
   the worker still answers its health checks. The sidecar sees the steps
   stop, declares the job HUNG after ``--stall-timeout-s`` and, with
   ``on_hung=restart``, kills the workers' actors through Ray.
4. Ray Train restarts the worker group from the latest checkpoint
   (``FailureConfig(max_failures=2)``) and the run completes every step.

While it runs, a live table shows each rank as the sidecar sees it (on a
terminal, as ``trainprobe top`` shows it: the ranks' recent arrival lag as
coloured cells, so the hanging rank turns red and is marked CULPRIT; the
workers watch DDP's collectives for that; the view is ``_ray_demo_view.py``);
at the end, a summary tells the story from the incident log.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
JOB = "trainprobe-demo"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-s", type=float, default=0.1, help="extra sleep per step")
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--hang-rank", type=int, default=1)
    p.add_argument("--hang-at", type=int, default=23, help="step inside which the rank hangs")
    p.add_argument("--no-hang", action="store_true", help="a healthy run")
    p.add_argument("--stall-timeout-s", type=float, default=3.0)
    p.add_argument("--refresh-s", type=float, default=0.5, help="table refresh period")
    return p.parse_args(argv)


def prepare_environment(workdir: Path) -> None:
    """Ray workers inherit this process's environment at ray.init."""
    roots = [str(REPO / d) for d in ("proto", "hooks", "sidecar")] + [str(EXAMPLES)]
    for root in reversed(roots):
        if root not in sys.path:
            sys.path.insert(0, root)
    os.environ["PYTHONPATH"] = os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")])
    os.environ["TRAINPROBE_RUNTIME_DIR"] = str(workdir / "run")  # private node sockets
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def describe(record: dict[str, Any], started_wall: float) -> list[str]:
    """One scrolling event line (or a few) per incident-log record."""
    t = f"t+{record.get('time', time.time()) - started_wall:5.1f}s" if "time" in record else ""
    kind = record["type"]
    if kind == "incident":
        from trainprobe.sidecar.cli.incidents.story import culprit_line

        out = [
            f"  >> {t} incident {record['id']}: {record['verdict']} (rule {record['rule']}), "
            f"detected {record['detection_latency_s']:.2f}s after the last step; "
            f"action: {record['action']}"
        ]
        line = culprit_line(record)
        return [*out, f"  >> {line}"] if line else out
    if kind == "action":
        out = []
        for rank, o in sorted(record.get("outcomes", {}).items()):
            how = "through Ray (ray.kill)" if o.get("method") == "ray.kill" else o.get("method")
            if o.get("fallback"):
                how = f"by signals, Ray unusable: {o.get('ray_error')}"
            out.append(
                f"  >> rank {rank}: pid {o.get('pid')} killed {how}; actor "
                f"{o.get('actor_state', '?')}, pid gone: {o.get('pid_gone')}"
            )
        return out
    if kind == "recovery":
        return [
            f"  >> rank {record['rank']} is back as pid {record['new_pid']}: first step "
            f"{record['first_step']}, {record['resumed_after_s']:.1f}s after the kill"
        ]
    return []


def summary(
    records: list[dict[str, Any]],
    events: list[dict[str, Any]],
    result: Any,
    error: BaseException | None,
    steps: int,
    started_wall: float,
) -> list[str]:
    lines = ["", "Summary"]
    hangs = [e for e in events if e["event"] == "hang"]
    incidents = [r for r in records if r["type"] == "incident"]
    for h in hangs:
        lines.append(
            f"  hang       rank {h['rank']} (pid {h['pid']}) stopped inside step {h['step']} at "
            f"t+{h['t'] - started_wall:.1f}s (its peer waits for it in the allreduce)"
        )
    from trainprobe.sidecar.cli.incidents.story import culprit_line

    for inc in incidents:
        lines.append(
            f"  detected   t+{inc['time'] - started_wall:.1f}s, {inc['detection_latency_s']:.2f}s "
            f"after the last step: {inc['verdict']} (rule {inc['rule']})"
        )
        if line := culprit_line(inc):
            lines.append(f"  {line}")
    for rec in (r for r in records if r["type"] == "action"):
        for rank, o in sorted(rec.get("outcomes", {}).items()):
            via = "through Ray: ray.kill" if o.get("method") == "ray.kill" else o.get("method")
            lines.append(
                f"  killed     rank {rank} (pid {o.get('pid')}) {via} of actor "
                f"{str(o.get('actor_id', ''))[:12]}…: {o.get('actor_state')} "
                f"({str(o.get('death_cause', '')).split(':')[0]}), pid gone: {o.get('pid_gone')}"
            )
    restarts = sorted({e["restored_step"] for e in events if e["event"] == "start"} - {0})
    for step in restarts:
        lines.append(f"  restarted  Ray Train restored the checkpoint of step {step}")
    for rec in (r for r in records if r["type"] == "recovery"):
        lines.append(
            f"  resumed    rank {rec['rank']} as pid {rec['new_pid']} at step {rec['first_step']}, "
            f"{rec['resumed_after_s']:.1f}s after the kill (Ray's restart time)"
        )
    done = sorted(e["rank"] for e in events if e["event"] == "done")
    if error is None and result is not None and result.error is None:
        lines.append(
            f"  finished   all {steps} steps on ranks {done}; last reported step "
            f"{result.metrics.get('step')}"
        )
    else:
        lines.append(f"  FAILED     {error or result.error}")
    if not incidents:
        lines.append("  no incident: the run was healthy")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="trainprobe-demo-"))
    prepare_environment(workdir)
    import grpc
    import ray
    import ray_train_job as job
    from _ray_demo_view import RankView, Screen, status_rows

    from trainprobe.proto import probe_pb2, probe_pb2_grpc
    from trainprobe.sidecar import load_settings
    from trainprobe.sidecar.act.incident_log import read_incident_log
    from trainprobe.sidecar.ray import start_sidecars, stop_sidecars

    started, started_wall = time.monotonic(), time.time()
    print("trainprobe Ray Train demo: starting an embedded local Ray (about 10 s)...", flush=True)
    ray.init(num_cpus=2, log_to_driver=False, logging_level=logging.ERROR)
    try:
        settings = load_settings(
            env={},
            cli={
                "stall_timeout_s": str(args.stall_timeout_s),
                # The hung rank sleeps: ambiguous evidence, acted on after the patience
                # (auto, >= 90 s, by default); the demo keeps it short.
                "hang_patience_s": "5",
                "on_hung": "restart",
                "kill_grace_s": "2",
                "state_dir": str(workdir / "state"),
                "log_level": "warning",
            },
        )
        (node,) = start_sidecars(settings)
        if node.error:
            print(f"no sidecar: {node.error}", file=sys.stderr)
            return 1
        print(f"sidecar actor on node {node.node_id[:12]}… listening on {node.socket}")
        progress = workdir / "progress.jsonl"
        config = {
            "steps": args.steps,
            "step_s": args.step_s,
            "ckpt_every": args.ckpt_every,
            "hang_rank": -1 if args.no_hang else args.hang_rank,
            "hang_at": args.hang_at,
            "progress": str(progress),
            # Collective sequence numbers and issue times: the sidecar names the
            # culprit, and its arrival lag shows in the live view.
            "watch_ddp": True,
        }
        trainer = job.make_trainer(config, str(workdir / "storage"), JOB, max_failures=2)
        outcome: dict[str, Any] = {}

        def fit() -> None:
            try:
                outcome["result"] = trainer.fit()
            except BaseException as err:
                outcome["error"] = err

        runner = threading.Thread(target=fit, name="fit", daemon=True)
        runner.start()
        print(
            f"TorchTrainer: 2 workers x {args.steps} steps, checkpoint every "
            f"{args.ckpt_every}"
            + ("" if args.no_hang else f"; rank {args.hang_rank} will hang in step {args.hang_at}"),
            flush=True,
        )
        view = RankView(JOB)
        seen = 0
        log_path = Path(node.incident_log)
        request = probe_pb2.StatusRequest(job_id=JOB)
        with grpc.insecure_channel(node.socket) as channel:
            stub = probe_pb2_grpc.SidecarStub(channel)
            screen = Screen(stub, JOB)
            if screen.live is not None:
                screen.live.start()
            while True:
                alive = runner.is_alive()
                records = read_incident_log(log_path) if log_path.exists() else []
                lines = [line for r in records[seen:] for line in describe(r, started_wall)]
                view.note_records(records[seen:])
                seen = len(records)
                table = view.lines(status_rows(stub, request), started, args.stall_timeout_s)
                screen.frame(lines, table, force=not alive or bool(lines))
                if not alive:
                    break
                time.sleep(args.refresh_s)
            if screen.live is not None:
                screen.live.stop()
        records = read_incident_log(log_path) if log_path.exists() else []
        for line in summary(
            [r for r in records if r.get("job_id") == JOB],
            job.read_events(progress),
            outcome.get("result"),
            outcome.get("error"),
            args.steps,
            started_wall,
        ):
            print(line)
        print(f"  total      {time.monotonic() - started:.0f}s; incident log: {log_path}")
        ok = "error" not in outcome and outcome["result"].error is None
        return 0 if ok else 1
    finally:
        stop_sidecars()
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
