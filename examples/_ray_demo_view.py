"""ray_demo.py's live view: what the node's sidecar says of each rank while the
run goes on.

On a terminal it is ``trainprobe top``'s view, redrawn beneath the scrolling
events (the ranks' recent arrival lag as coloured cells: the hanging rank
turns red and is marked CULPRIT); elsewhere a plain table every few seconds,
which remembers the worst verdict each pid got and which pids trainprobe
killed. Imported by ray_demo.py once examples/ is on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

__all__ = ["RankView", "Screen", "status_rows"]


class Screen:
    """Events scroll; on a terminal, trainprobe top's view is redrawn beneath them."""

    def __init__(self, stub: Any, job: str) -> None:
        from rich.console import Console
        from rich.live import Live

        from trainprobe.sidecar.cli.top.live import fetcher
        from trainprobe.sidecar.cli.top.view import TopModel

        self.console = Console()
        self.tty = self.console.is_terminal
        self._last_plain = 0.0
        self.live = Live(console=self.console, auto_refresh=False) if self.tty else None
        self.model = TopModel()
        self.fetch = fetcher(stub, (), job, 2.0)

    def frame(self, events: list[str], table: list[str], force: bool = False) -> None:
        if self.live is not None:
            from trainprobe.sidecar.cli.top.view import render

            for line in events:
                self.console.print(line, highlight=False, markup=False)
            with contextlib.suppress(Exception):  # the sidecar restarts with the workers
                self.model.update(*self.fetch(), time.monotonic())
            width, height = self.console.size
            view = render(self.model, "lag", title="trainprobe", width=width, height=height)
            self.live.update(view, refresh=True)
        else:
            for line in events:
                print(line)
            if force or time.monotonic() - self._last_plain >= 5.0:
                self._last_plain = time.monotonic()
                print("\n".join(table))
        sys.stdout.flush()


def status_rows(stub: Any, request: Any) -> list[Any]:
    try:
        return list(stub.GetStatus(request, timeout=2).workers)
    except Exception:
        return []


class RankView:
    """What the table remembers across refreshes: the worst verdict each pid
    got, and which pids trainprobe killed (a killed session is no longer judged)."""

    SEVERITY = {"OK": 0, "DEGRADED": 1, "UNRESPONSIVE": 2, "HUNG": 3, "DEAD": 4}

    def __init__(self, job: str) -> None:
        self.job = job
        self.worst: dict[int, str] = {}
        self.killed: dict[int, str] = {}

    def note_records(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            if r["type"] == "incident":  # the verdict may last one tick before the kill
                for pid in r["pids"]:
                    self.worst[int(pid)] = r["verdict"]
            for o in r.get("outcomes", {}).values() if r["type"] == "action" else ():
                via = "via Ray" if o.get("method") == "ray.kill" else "by signal"
                self.killed[int(o.get("pid", 0))] = f"killed {via}"

    def lines(self, rows: list[Any], started: float, threshold_s: float) -> list[str]:
        out = [
            f"  job {self.job}  ·  t+{time.monotonic() - started:5.1f}s  ·  stall threshold "
            f"{threshold_s:g}s  ·  from the node sidecar's status",
            f"  {'RANK':>4} {'PID':>7} {'STEP':>5} {'STEPS/S':>8} {'REPORT AGE':>10}  "
            f"{'VERDICT':<13}STATE",
        ]
        for w in sorted(rows, key=lambda w: w.rank):
            worst = self.worst.get(w.pid, "OK")
            if self.SEVERITY.get(w.verdict, 0) >= self.SEVERITY.get(worst, 0):
                worst = self.worst[w.pid] = w.verdict
            step = str(w.step) if w.has_step else "-"
            out.append(
                f"  {w.rank:>4} {w.pid:>7} {step:>5} {w.steps_per_s:>8.1f} "
                f"{w.report_age_s:>9.1f}s  {worst:<13}{self.killed.get(w.pid, w.state)}"
            )
        if not rows:
            out.append("  (waiting for the workers to report)")
        return out
