"""One job of the fault matrix (bench/bench_faults.py) under one tool.

A :class:`FaultJob` is a :class:`detect_jobs.Job` that runs
``bench/harness/fault_worker.py`` instead of tests/workers/ddp_worker.py:

- ``tp_watch`` / ``tp``: trainprobe's hook with its default 1 s interval, with
  and without ``hook.watch_ddp(model)``, watched by a real sidecar started
  with no flags at all (the shipped defaults); ranks started directly.
- ``nvrx`` / ``gloo``: as in detect_jobs.py (ft_launcher with NVRx's default
  config and timeouts calculated after step 20; torchrun with a gloo timeout).

What it reads back: onset (the faulty rank's ``hang`` line; for a healthy
case the ``event`` line, or the sidecar freeze), every rank's death, clean
ends (``done``), and for trainprobe each incident of the job: when the
first verdict came, when one first named the culprit (its diagnosis's
culprits, else the ranks it is about) and whom it named.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.detect_jobs import Job, JobSpec, nvrx_timeout_time

FAULT_WORKER = Path(__file__).resolve().with_name("fault_worker.py")
TP = ("tp_watch", "tp")
NOT_VERDICTS = (None, "OK", "DEGRADED")
#: The sidecar freeze of the ``sidecar_frozen`` case.
FREEZE_S = 30.0


@dataclass
class FaultSpec(JobSpec):
    healthy: bool = False
    steps: int = 100000


class FaultJob(Job):
    spec: FaultSpec
    script = FAULT_WORKER
    tp_tools = TP

    def worker_args(self) -> list[str]:
        s = self.spec
        args = ["--case", s.kind, "--case-rank", str(s.hang_rank), "--case-at", str(s.hang_at)]
        args += ["--steps", str(s.steps), "--step-s", str(s.step_s)]
        args += ["--start-file", str(self.start_file)]
        if s.tool == "tp_watch":
            return [*args, "--watch-ddp"]
        if s.tool == "tp":
            return args
        if s.tool == "nvrx":
            return [*args, "--no-hook", "--nvrx", "--nvrx-calc-at", "20"]
        return [*args, "--no-hook", "--pg-timeout-s", str(s.pg_timeout_s)]

    # -- the sidecar_frozen case ------------------------------------------------------

    def freeze_sidecar(self, now: float) -> None:
        assert self.sidecar is not None and self.sidecar.proc is not None
        os.kill(self.sidecar.proc.pid, signal.SIGSTOP)
        self.extra["frozen_at"] = now
        self.onset = now

    def thaw_sidecar(self) -> None:
        if self.sidecar is not None and self.sidecar.proc is not None:
            os.kill(self.sidecar.proc.pid, signal.SIGCONT)
            self.extra["thawed"] = True

    # -- observing --------------------------------------------------------------------

    def poll_events(self) -> None:
        for r in self._new_events():
            event = r.get("event")
            if event in ("hang", "event") and self.onset is None:
                self.onset = r["t"]
            elif event == "error" and self.first_error is None:
                self.first_error = r["t"]
            elif event == "done":
                self.done_ranks.add(r["rank"])
            elif event == "step":
                self.extra["max_step"] = max(self.extra.get("max_step", 0), r["step"])
        if self.spec.tool in TP:
            self._read_incidents()
        elif self.verdict_at is None:
            self.verdict_at = (
                nvrx_timeout_time(self.log_path) if self.spec.tool == "nvrx" else self.first_error
            )

    def _read_incidents(self) -> None:
        assert self.sidecar is not None
        if self.extra.get("named_at") is not None:
            return
        for r in self.sidecar.incidents():
            # Any verdict worse than DEGRADED counts, whatever new names the
            # sidecar gives them (a suspect under patience, say).
            if r.get("job_id") != self.job_id or r.get("verdict") in NOT_VERDICTS:
                continue
            diagnosis = r.get("diagnosis") or {}
            # The diagnosis's culprits (none for a tie); the incident's ranks only
            # where there is no diagnosis (a DEAD rank's exit).
            has = "culprits" in diagnosis
            named = sorted((diagnosis["culprits"] or []) if has else r.get("ranks") or [])
            if self.verdict_at is None:
                self.verdict_at = float(r["time"])
                self.extra.update(rule=r["rule"], first_named=named, incident=r["id"])
            if named == [self.spec.hang_rank]:
                self.extra["named_at"] = float(r["time"])
                # ...and where it is stuck (read from its stacks).
                self.extra["where"] = str(self.spec.hang_rank) in (diagnosis.get("where") or {})
                return

    @property
    def clean(self) -> bool:
        return len(self.done_ranks) == self.spec.ranks

    def result(self) -> dict[str, Any]:
        def since(t: float | None) -> float | None:
            return None if t is None or self.onset is None else round(t - self.onset, 3)

        s = self.spec
        out: dict[str, Any] = {
            "tool": s.tool,
            "case": s.kind,
            "ranks": s.ranks,
            "healthy": s.healthy,
            "case_rank": s.hang_rank,
            "case_at": s.hang_at,
            "onset_seen": self.onset is not None,
            "verdict_s": since(self.verdict_at),
            **{k: v for k, v in self.extra.items() if k not in ("named_at", "wave")},
        }
        if s.healthy:
            out["clean"] = self.clean
            # A false kill: any rank gone without finishing (the tool killed it,
            # or its collective timed out). A verdict alone is counted apart.
            out["false_kill"] = not self.clean
            out["verdicts"] = int(self.verdict_at is not None)
            return out
        out["named_s"] = since(self.extra.get("named_at"))
        out["culprit_dead_s"] = since(self.dead_at.get(s.hang_rank))
        out["all_dead_s"] = since(max(self.dead_at.values())) if self.all_dead else None
        out["deaths_s"] = {str(r): since(t) for r, t in sorted(self.dead_at.items())}
        # Right: the culprit is the first rank to go (deaths seen in the same
        # 50 ms poll tie, and a tie is no wrong kill) and, for trainprobe, a
        # verdict named it and it alone.
        mine = self.dead_at.get(s.hang_rank)
        first = mine is not None and all(mine <= t for t in self.dead_at.values())
        named_ok = s.tool not in TP or self.extra.get("named_at") is not None
        out["culprit_right"] = first and named_ok
        # A 2-rank mismatch is a tie: each rank waits on the other's collective, and
        # no majority says which one is wrong. Counted apart (``tie``), never right.
        out["tie"] = s.kind == "mismatch" and s.ranks == 2
        # A rank gone before onset, other than the case rank (kill9 ends itself).
        out["false_kill"] = any(
            t < (self.onset or float("inf")) for r, t in self.dead_at.items() if r != s.hang_rank
        )
        return out
