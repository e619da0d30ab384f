"""The engine's early read of a silent local rank, on a fake clock and a real process.

A real child process, really SIGSTOPped (state T in its /proc), is the
session's verified pid; the engine reads it with its own reader
(``ports.proc_states``, a worker thread) and opens the episode with a
``stopped`` incident after two reads, long before the 3 s stall floor. While
the sidecar is itself behind its reports (core/session/pace.py), the same silence is
its own lateness: nothing is read and nothing opens. Registry, rules, the
hang machine, Actions and the incident log are real; the killer records
(tests/unit/test_engine.py's ``FakeKiller``), so no signal is sent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.core_builders import hello, report
from tests.unit.test_engine import T0, build
from trainprobe.sidecar.act.evidence import read_states
from trainprobe.sidecar.act.procs import proc_start_ticks
from trainprobe.sidecar.core.hang.stopped import CONFIRM_GAP_S
from trainprobe.sidecar.core.session.hello import VerifiedProcess
from trainprobe.sidecar.core.session.model import Verdict, WorkerState
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.engine import Engine


@contextmanager
def stopped_child() -> Iterator[int]:
    child = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        # The stop takes effect when the child next runs: on a loaded machine,
        # a moment later. The test starts from a child the kernel shows stopped.
        deadline = time.monotonic() + 30
        while read_states([(child.pid, None)]) != ["T"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_states([(child.pid, None)]) == ["T"]
        yield child.pid
    finally:
        child.kill()
        child.wait(10)


def local(reg: Registry, rank: int, pid: int) -> WorkerState:
    h = hello(rank=rank, world=2, pid=pid)
    w = reg.open(h, T0 - 5, VerifiedProcess(pid, os.getuid(), proc_start_ticks(pid)))
    w.local = True
    reg.apply(w, report(T0, step=10, seq=1), T0)
    return w


async def ticks(engine: Engine, clock: object, peer: WorkerState, times: list[float]) -> list:
    opened = []
    for t in times:
        clock.now = peer.last_report_at = t  # type: ignore[attr-defined]
        opened += engine.tick()
        await engine._reads.wait(10)  # the read, off the loop, comes back
    return opened


def test_a_stopped_local_rank_opens_its_episode_after_two_reads(tmp_path: Path) -> None:
    engine, reg, _, clock, _ = build(tmp_path, patience_s=None)
    with stopped_child() as pid:
        peer, rank1 = local(reg, 0, os.getpid()), local(reg, 1, pid)

        async def run() -> list:
            steps = [T0 + 1.0, T0 + 1.3, T0 + 1.3 + CONFIRM_GAP_S, T0 + 1.6]
            opened = await ticks(engine, clock, peer, steps)
            await engine.drain()
            return opened

        opened = asyncio.run(run())
    (inc,) = opened
    assert (inc.rule, inc.verdict, inc.ranks) == ("stopped", Verdict.UNRESPONSIVE, [1])
    assert inc.evidence["1"]["state"] == "T" and rank1.verdict is Verdict.UNRESPONSIVE
    assert abs(inc.onset_at - T0) < 1e-6  # its last report


def test_a_sidecar_behind_its_reports_reads_nobody(tmp_path: Path) -> None:
    engine, reg, _, clock, _ = build(tmp_path, patience_s=None)
    with stopped_child() as pid:
        peer, _rank1 = local(reg, 0, os.getpid()), local(reg, 1, pid)
        # Our own loop ran 2 s late a moment ago: 1.6 s of silence is ours.
        engine.pace.note_tick(T0 + 1.0, 2.1, 0.1)

        async def run() -> list:
            steps = [T0 + 1.0, T0 + 1.3, T0 + 1.3 + CONFIRM_GAP_S, T0 + 1.6]
            return await ticks(engine, clock, peer, steps)

        assert asyncio.run(run()) == []
        assert len(engine.stopped) == 0


TRACER = Path(__file__).parents[1] / "workers" / "tracer.py"


@contextmanager
def traced_child() -> Iterator[int]:
    """A child held by a debugger's stop (ptrace: /proc state ``t``), as gdb leaves it."""
    child = subprocess.Popen(["sleep", "60"])
    tracer = subprocess.Popen(
        [sys.executable, str(TRACER), str(child.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert tracer.stdout is not None and tracer.stdout.readline().strip() == "traced"
        assert read_states([(child.pid, None)]) == ["t"]
        yield child.pid
    finally:
        tracer.kill()
        tracer.wait(10)
        child.kill()
        child.wait(10)


def test_a_rank_a_debugger_holds_is_never_found_stopped(tmp_path: Path) -> None:
    """A rank stopped under gdb is held by its user, not hung: the early read
    never opens its episode (the rules' clocks judge it as before)."""
    engine, reg, _, clock, _ = build(tmp_path, patience_s=None)
    with traced_child() as pid:
        peer, _rank1 = local(reg, 0, os.getpid()), local(reg, 1, pid)

        async def run() -> list:
            steps = [T0 + 1.0, T0 + 1.3, T0 + 1.3 + CONFIRM_GAP_S, T0 + 1.6, T0 + 2.0]
            return await ticks(engine, clock, peer, steps)

        assert asyncio.run(run()) == []


def test_a_stopped_process_that_took_a_ranks_pid_is_not_that_rank(tmp_path: Path) -> None:
    """The rank's pid now names another process (reused: another start time), one
    the kernel holds stopped: the read finds nothing ("") and nothing opens."""
    engine, reg, _, clock, _ = build(tmp_path, patience_s=None)
    with stopped_child() as pid:
        peer = local(reg, 0, os.getpid())
        h = hello(rank=1, world=2, pid=pid)
        start = proc_start_ticks(pid)
        assert start is not None
        rank1 = reg.open(h, T0 - 5, VerifiedProcess(pid, os.getuid(), start - 1))
        rank1.local = True
        reg.apply(rank1, report(T0, step=10, seq=1), T0)
        assert read_states([(pid, start - 1)]) == [""]

        async def run() -> list:
            steps = [T0 + 1.0, T0 + 1.3, T0 + 1.3 + CONFIRM_GAP_S, T0 + 1.6, T0 + 2.0]
            return await ticks(engine, clock, peer, steps)

        assert asyncio.run(run()) == []
