"""Process facts on real child processes: stopped, alive, the same process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.support import wait_for
from trainprobe.sidecar.act.procs import pid_alive, proc_start_ticks, proc_stopped


def test_a_sigstopped_child_reads_as_stopped_until_continued() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid) and not proc_stopped(child.pid)
        ticks = proc_start_ticks(child.pid)
        assert ticks is not None and ticks > 0
        os.kill(child.pid, signal.SIGSTOP)
        wait_for(lambda: proc_stopped(child.pid), 10, 0.01, "the stopped state")
        os.kill(child.pid, signal.SIGCONT)
        wait_for(lambda: not proc_stopped(child.pid), 10, 0.01, "the running state")
        assert proc_start_ticks(child.pid) == ticks  # the same process throughout
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid) and not proc_stopped(child.pid)
