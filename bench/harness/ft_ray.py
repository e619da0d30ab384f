"""Ray Train on one embedded local Ray: replicated (TorchftConfig) and not.

- ``ray_ft_trial``: ``examples/ray_torchft_job.py``, 2 workers, each its own
  torchft replica group; worker 1 faults at a committed step. With the
  per-node sidecar (shipped defaults), measured on this machine's wall clock
  from onset: the survivor's next committed step, the culprit's process gone,
  the replacement entering ``train_func`` (Ray Train's part ends there), its
  hook and Manager made, and its first committed step; and, at the end,
  whether the two replicas hold equal parameters, how many times each worker
  started (a single-group replacement starts worker 1 twice and worker 0
  once), and the evictions. Where the survivor's time goes: onset to the
  incident (``incident_s``), the kill's own time (``kill_s``), and the culprit
  gone to the survivor's next commit (``survivor_after_gone_s``: the
  lighthouse's heartbeat timeout, when the culprit heartbeated until its kill).
  ``lighthouse``: ``trainprobe`` (``trainprobe.hooks.ray_train.torchft_config``)
  or ``ray`` (Ray's own example: ``{"min_replicas": 1}``, torchft's defaults).
- ``replicate_trial``: the one-liner's shape users write
  (``examples/ray_replicated.py``: examples/ddp_train.py's loop with
  ``replicate(hook, model, opt)``), ``groups`` workers each its own replica
  group, the middle one (``groups // 2``) faulting at step 15: from onset,
  every survivor's first step past the hung one (the slowest is the trial's
  ``survivor_resumed_s``), the culprit gone, the replacement's first step,
  and the same checks at the end (one pid for every survivor, two for the
  culprit's rank, equal parameters, the evictions).
- ``restart_trial``: ``examples/ray_train_job.py`` (DDP, no replicas), rank 1
  sleeps or SIGSTOPs itself; the sidecar with its shipped defaults kills, Ray
  Train restarts the whole group from the last checkpoint
  (bench/harness/ray_restart.py): onset to the kill, to every rank stepping
  again, and where the time between goes.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from tests.support import free_port, read_jsonl

__all__ = ["RAY_EXAMPLE_LIGHTHOUSE", "RaySession"]

#: Ray's own torchft example (torchft_linear_example.py): torchft's lighthouse defaults.
RAY_EXAMPLE_LIGHTHOUSE: dict[str, Any] = {"min_replicas": 1}


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def _first(rows: list[dict[str, Any]], pred: Any) -> dict[str, Any] | None:
    return next((r for r in rows if pred(r)), None)


def _watch(
    runner: threading.Thread, progress: Path, event: str, limit_s: float
) -> tuple[dict[str, Any] | None, float | None, list[dict[str, Any]]]:
    """While ``runner`` (the fit) lasts, at most ``limit_s``: the first ``event``
    row, when its pid was seen gone, and every row at the end."""
    deadline = time.time() + limit_s
    row, gone_at = None, None
    while time.time() < deadline and runner.is_alive():
        row = row or _first(read_jsonl(progress), lambda r: r["event"] == event)
        if row and gone_at is None and not _pid_alive(int(row["pid"])):
            gone_at = time.time()
        time.sleep(0.05)
    runner.join(5)
    return row, gone_at, read_jsonl(progress)


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1e-6 for x, y in zip(a, b, strict=True))


class RaySession:
    """ray.init once; the per-node sidecar with the shipped defaults."""

    def __init__(self, workdir: Path, num_cpus: int = 2) -> None:
        import logging

        import bench_ray_restart as restart

        restart.setup_paths(workdir)
        import ray

        from trainprobe.sidecar import load_settings
        from trainprobe.sidecar.ray import start_sidecars

        self.workdir, self.ray, self.restart = workdir, ray, restart
        # A fresh cluster and dashboard port (the State API needs it), never another
        # run's on a shared machine.
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=True,
            dashboard_port=free_port(),
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
        settings = load_settings(env={}, cli={"state_dir": str(workdir / "state")})
        (self.node,) = start_sidecars(settings)
        self.n = 0

    def close(self) -> None:
        from trainprobe.sidecar.ray import stop_sidecars

        try:
            stop_sidecars()
        finally:
            self.ray.shutdown()

    def records(self, job: str) -> list[dict[str, Any]]:
        return [r for r in read_jsonl(Path(self.node.incident_log)) if r.get("job_id") == job]

    def ft_trial(
        self, fault: str, steps: int, limit_s: float, lighthouse: str = "trainprobe"
    ) -> dict[str, Any]:
        import ray_torchft_job

        self.n += 1
        name = f"ft{self.n}"
        progress = self.workdir / f"{name}.jsonl"
        out: dict[str, Any] = {
            "fault": fault,
            "lighthouse": lighthouse,
            "load": round(os.getloadavg()[0], 2),
        }
        cfg = {"fault": fault, "fault_rank": 1, "steps": steps, "progress": str(progress)}
        kwargs = None if lighthouse == "trainprobe" else RAY_EXAMPLE_LIGHTHOUSE
        trainer = ray_torchft_job.make_trainer(
            cfg, str(self.workdir / "storage"), name, lighthouse=kwargs
        )
        res: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: res.setdefault("r", trainer.fit()), daemon=True)
        runner.start()
        fault_row, gone_at, rows = _watch(runner, progress, "fault", limit_s + 120)
        if fault_row is None:
            return {**out, "error": "no fault"}
        onset, cpid = float(fault_row["t"]), int(fault_row["pid"])

        def after(event: str, rank: int, new: bool = False) -> float | None:
            r = _first(
                rows,
                lambda r: (
                    r["event"] == event
                    and r["rank"] == rank
                    and r["t"] > onset + (0.2 if event == "step" else 0)
                    and (not new or r["pid"] != cpid)
                ),
            )
            return round(float(r["t"]) - onset, 2) if r else None

        starts = [r["rank"] for r in rows if r["event"] == "start"]
        done = {r["rank"]: r for r in rows if r["event"] == "done"}
        survivor = {r["pid"] for r in rows if r["rank"] == 0}
        recs = self.records(name)
        acts = [r for r in recs if r.get("type") == "action" and r.get("action")]
        result = res.get("r")
        incident = _first(recs, lambda r: r.get("type") == "incident" and r["action"] == "evict")
        evict = _first(acts, lambda r: r["action"] == "evict")
        kill = ((evict or {}).get("outcomes") or {}).get("1") or {}
        resumed = after("step", 0)
        out.update(
            incident_s=round(float(incident["time"]) - onset, 2) if incident else None,
            kill_s=kill.get("seconds"),
            kill_signalled=kill.get("signalled_first"),
            survivor_after_gone_s=(
                round(resumed - (gone_at - onset), 2) if resumed is not None and gone_at else None
            ),
        )
        out.update(
            survivor_resumed_s=resumed,
            survivor_same_pid=len(survivor) == 1,
            culprit_gone_s=round(gone_at - onset, 2) if gone_at else None,
            replacement_begin_s=after("begin", 1, new=True),
            replacement_start_s=after("start", 1, new=True),
            replacement_stepping_s=after("step", 1, new=True),
            starts={"0": starts.count(0), "1": starts.count(1)},
            single_group_replacement=starts.count(0) == 1 and starts.count(1) == 2,
            params_equal=len(done) == 2 and _close(done[0]["params"], done[1]["params"]),
            evictions=sum(1 for a in acts if a["action"] == "evict"),
            other_kills=sum(1 for a in acts if a["action"] in ("kill", "restart")),
            run_ok=result is not None and result.error is None,
        )
        return out

    def replicate_trial(
        self, fault: str, groups: int, steps: int, limit_s: float
    ) -> dict[str, Any]:
        """examples/ray_replicated.py's ``train_func`` on ``groups`` workers."""
        import ray_replicated

        self.n += 1
        name, hung = f"rep{self.n}", groups // 2
        progress = self.workdir / f"{name}.jsonl"
        out: dict[str, Any] = {
            "fault": fault,
            "shape": "replicate",
            "groups": groups,
            "lighthouse": "trainprobe",
            "load": round(os.getloadavg()[0], 2),
        }
        argv = ["--steps", str(steps), "--progress", str(progress), "--hang-rank", str(hung)]
        argv += ["--hang-at", "15", "--hang-how", fault]
        trainer = ray_replicated.make_trainer(argv, str(self.workdir / "storage"), name, groups)
        res: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: res.setdefault("r", trainer.fit()), daemon=True)
        runner.start()
        hang, gone_at, rows = _watch(runner, progress, "hang", limit_s + 240)
        if hang is None:
            return {**out, "error": "no hang"}
        onset, cpid = float(hang["t"]), int(hang["pid"])
        steps_after = [r for r in rows if r["event"] == "step" and r["t"] > onset]
        others = [r for r in range(groups) if r != hung]
        resumed = {}
        for rank in others:
            r = _first(steps_after, lambda r, k=rank: r["rank"] == k and r["step"] > hang["step"])
            resumed[str(rank)] = round(float(r["t"]) - onset, 2) if r else None
        back = _first(steps_after, lambda r: r["rank"] == hung and r["pid"] != cpid)
        pids = {k: {r["pid"] for r in rows if r.get("rank") == k} for k in range(groups)}
        done = {r["rank"]: r for r in rows if r["event"] == "done"}
        recs = self.records(name)
        acts = [r for r in recs if r.get("type") == "action" and r.get("action")]
        incident = _first(recs, lambda r: r.get("type") == "incident")
        evict = _first(acts, lambda r: r["action"] == "evict")
        kill = ((evict or {}).get("outcomes") or {}).get(str(hung)) or {}
        every = [x for x in resumed.values() if x is not None]
        slowest = max(every) if len(every) == len(others) else None
        result = res.get("r")
        out.update(
            survivor_resumed_s=slowest,
            survivors_resumed_s=resumed,
            survivor_same_pid=all(len(pids[k]) == 1 for k in others),
            culprit_gone_s=round(gone_at - onset, 2) if gone_at else None,
            replacement_stepping_s=round(float(back["t"]) - onset, 2) if back else None,
            incident_s=round(float(incident["time"]) - onset, 2) if incident else None,
            incident_rule=(incident or {}).get("rule"),
            kill_s=kill.get("seconds"),
            kill_method=kill.get("method"),
            kill_signalled=kill.get("signalled_first"),
            survivor_after_gone_s=(
                round(slowest - (gone_at - onset), 2) if slowest is not None and gone_at else None
            ),
            starts={str(k): len(v) for k, v in pids.items()},
            single_group_replacement=len(pids[hung]) == 2
            and all(len(pids[k]) == 1 for k in others),
            params_equal=len(done) == groups
            and all(_close(done[0]["params"], done[k]["params"]) for k in range(1, groups)),
            evictions=sum(1 for a in acts if a["action"] == "evict"),
            other_kills=sum(1 for a in acts if a["action"] in ("kill", "restart")),
            run_ok=result is not None and result.error is None,
        )
        return out

    def restart_trial(self, hang: str = "sleep") -> dict[str, Any]:
        """Non-replicated Ray Train under the sidecar's shipped defaults."""
        from harness.ray_restart import restart_trial

        return restart_trial(self, hang)
