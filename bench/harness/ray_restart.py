"""Ray Train without replicas: a hung rank killed by the sidecar, every rank back.

``examples/ray_train_job.py`` (DDP, 2 CPU gloo workers, a checkpoint every 5
steps) under ``FailureConfig(max_failures=1)``; rank 1 hangs in step 30 (past
the stall rule's 20 warm-up steps, as a hang in a running job would be):
``sleep`` (ambiguous: killed after the patience) or ``stop`` (SIGSTOP:
definitive). The per-node sidecar on its shipped defaults kills; Ray Train
restarts the whole group from the last checkpoint.

Measured as bench/bench_restart.py measures torchrun's restarts, from the
onset (the hang's own timestamp): the hung process gone (``killed_s``, polled
every 20 ms), every rank stepping again (``all_stepping_s``: the latest of the
ranks' first step in the restarted group), the steps redone (the last step
before the hang minus the step the group resumed from). Where the time after
the kill goes, per rank of the restarted group: Ray Train entering
``train_func`` (``begin``: the old group torn down, new worker actors, the
process group), the checkpoint restored and the model wrapped in DDP
(``prepared``), the hook made (``start``), the first step (``step``): each
rank's, in ``phases_s``, from the onset.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from tests.support import read_jsonl

__all__ = ["STEPS", "restart_trial"]

STEPS, HANG_AT, CKPT_EVERY = 40, 30, 5


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"


def _firsts(rows: list[dict[str, Any]], event: str, after: float) -> dict[int, float]:
    """Each rank's first ``event`` later than ``after``."""
    out: dict[int, float] = {}
    for r in rows:
        if r["event"] == event and r["t"] > after and r["rank"] not in out:
            out[r["rank"]] = float(r["t"])
    return out


def restart_trial(session: Any, hang: str, limit_s: float = 400.0) -> dict[str, Any]:
    """One trial on ``session`` (bench/harness/ft_ray.py's ``RaySession``)."""
    import ray_train_job

    session.n += 1
    name = f"ddp{session.n}"
    progress = session.workdir / f"{name}.jsonl"
    cfg = {"steps": STEPS, "step_s": 0.05, "ckpt_every": CKPT_EVERY, "hang_rank": 1}
    cfg |= {"hang_at": HANG_AT, "hang_how": hang, "progress": str(progress)}
    out: dict[str, Any] = {
        "orchestrator": "ray_train",
        "hang": hang,
        "load": round(os.getloadavg()[0], 2),
    }
    trainer = ray_train_job.make_trainer(cfg, str(session.workdir / "storage"), name)
    res: dict[str, Any] = {}
    began = time.time()
    runner = threading.Thread(target=lambda: res.setdefault("r", trainer.fit()), daemon=True)
    runner.start()
    hung, gone_at = None, None
    while runner.is_alive() and time.time() < began + limit_s:
        if hung is None:
            hung = next((e for e in read_jsonl(progress) if e["event"] == "hang"), None)
        elif gone_at is None and _gone(int(hung["pid"])):
            gone_at = time.time()
        time.sleep(0.02)
    runner.join(5)
    rows = read_jsonl(progress)
    result = res.get("r")
    out["wall_s"] = round(time.time() - began, 1)
    if hung is None:
        return {**out, "ok": False, "error": "no hang"}
    onset = float(hung["t"])
    again = [r for r in rows if r["event"] == "start" and r["restored_step"] > 0]
    # The restarted group: its first entry into train_func after the kill.
    cut = gone_at or onset
    phases = {ev: _firsts(rows, ev, cut) for ev in ("begin", "prepared", "start", "step")}
    before = [r["step"] for r in rows if r["event"] == "step" and r["t"] < onset]
    done = [r for r in rows if r["event"] == "done"]
    recs = session.records(name)
    acts = [r for r in recs if r.get("type") == "action" and r.get("outcomes")]
    decided = next((r for r in recs if r.get("type") == "decision" and r.get("act")), None)
    outcome = next(iter(acts[0]["outcomes"].values()), {}) if acts else {}
    out.update(
        ok=result is not None
        and result.error is None
        and len(done) == 2
        and (result.metrics or {}).get("step") == STEPS,
        error=None if result is None or result.error is None else repr(result.error)[:300],
        killed_s=round(gone_at - onset, 2) if gone_at else None,
        killed_ranks=sorted({int(k) for a in acts for k in a["outcomes"]}),
        kill_method=outcome.get("method"),
        kill_seconds=outcome.get("seconds"),
        rule=(decided or {}).get("rule"),
        patience_s=(decided or {}).get("patience_s"),
        resumed_from=min((r["restored_step"] for r in again), default=None),
        phases_s={
            ev: {str(k): round(t - onset, 2) for k, t in sorted(ts.items())}
            for ev, ts in phases.items()
        },
    )
    steps = phases["step"]
    if len(steps) == 2:
        out["all_stepping_s"] = round(max(steps.values()) - onset, 2)
    if before and out["resumed_from"] is not None:
        out["steps_redone"] = max(before) - out["resumed_from"]
    return out
