"""A culprit the kernel holds still (SIGSTOP, a cgroup freezer) is SIGKILLed first.

SIGTERM then SIGCONT would resume it where it stopped: an evicted torchft
replica then finishes, and commits, the step its peers discarded, and heartbeats
on to the lighthouse. Here a real stopped process records every signal that
reaches one of its handlers (SIGCONT, SIGTERM); a kill must leave the record
empty. Its child is handled as the tree kill handles every descendant.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support import PYTHON, wait_for
from tests.test_pause_e2e import freezer
from trainprobe.sidecar.act.pidproc import stat_fields
from trainprobe.sidecar.act.procs import pid_alive, proc_start_ticks
from trainprobe.sidecar.act.signals import KillOutcome, terminate

#: Records each handled signal in argv[1]; a child of its own sleeps; both run on.
RECORDER = (
    "import signal, subprocess, sys, time\n"
    "def note(name):\n"
    "    def handler(sig, frame):\n"
    "        with open(sys.argv[1], 'a') as fh:\n"
    "            fh.write(name + '\\n')\n"
    "    return handler\n"
    "signal.signal(signal.SIGCONT, note('SIGCONT'))\n"
    "signal.signal(signal.SIGTERM, note('SIGTERM'))\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
    "print(c.pid, flush=True)\n"
    "while True:\n"
    "    time.sleep(0.01)\n"
)


def _state(pid: int) -> str:
    fields = stat_fields(pid)
    return fields[0].decode() if fields else ""


@contextlib.contextmanager
def _recorder(log: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The recorder and its child's pid; both gone on the way out, whatever the kill did."""
    proc = subprocess.Popen([PYTHON, "-c", RECORDER, str(log)], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        time.sleep(0.3)  # the handlers are set (the child started after them)
        yield proc, child
    finally:
        proc.kill()
        proc.wait()
        if child and pid_alive(child):
            os.kill(child, signal.SIGKILL)


def _check(out: KillOutcome, proc: subprocess.Popen[str], child: int, log: Path) -> None:
    rec = out.to_record()
    # Never resumed: no handler of it ever ran.
    assert not log.exists() or log.read_text() == "", log.read_text()
    assert rec["exited"] and not rec["error"], rec
    assert rec["signalled_first"] == "SIGKILL", rec
    assert rec["signals"] == ["SIGKILL"], rec
    assert not rec["stopped_first"], rec
    # Its child as the tree kill ends any descendant: stopped, then SIGTERM and SIGCONT.
    kids = {c["pid"]: c for c in rec["children"]}
    assert list(kids) == [child], rec["children"]
    assert kids[child]["signals"][:3] == ["SIGSTOP", "SIGTERM", "SIGCONT"], kids
    assert kids[child]["exited"]
    proc.wait(5)
    assert not pid_alive(child)


def test_a_stopped_process_is_sigkilled_first_and_never_resumed(tmp_path: Path) -> None:
    log = tmp_path / "handled"
    with _recorder(log) as (proc, child):
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: _state(proc.pid) == "T", 10, 0.01, "the stop")
        t0 = time.monotonic()
        out = asyncio.run(terminate(proc.pid, 5.0, proc_start_ticks(proc.pid)))
        # No kill_grace_s waited: the SIGKILL came at once.
        assert time.monotonic() - t0 < 4.0
        _check(out, proc, child, log)


def test_a_running_process_still_gets_sigterm_first(tmp_path: Path) -> None:
    """The control: a process that runs may end by itself (its handler runs)."""
    log = tmp_path / "handled"
    with _recorder(log) as (proc, _child):
        out = asyncio.run(terminate(proc.pid, 0.5, proc_start_ticks(proc.pid))).to_record()
        assert out["exited"] and out["signalled_first"] == "", out
        assert out["signals"] == ["SIGTERM", "SIGCONT", "SIGKILL"], out
        assert "SIGTERM" in log.read_text()


def test_a_process_frozen_by_a_cgroup_v2_freezer_is_sigkilled_first(tmp_path: Path) -> None:
    # v2 only: a v1 freezer holds even a SIGKILLed process until it is thawed.
    log = tmp_path / "handled"
    with freezer("v2") as (group, knob, value), _recorder(log) as (proc, child):
        (group / "cgroup.procs").write_text(str(proc.pid))
        (group / knob).write_text(value)
        wait_for(lambda: "frozen 1" in (group / "cgroup.events").read_text(), 10, 0.01, "freeze")
        out = asyncio.run(terminate(proc.pid, 5.0, proc_start_ticks(proc.pid)))
        _check(out, proc, child, log)
