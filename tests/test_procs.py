"""Process facts on real child processes: stopped, alive, the same process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from tests.support import wait_for
from tests.test_time_namespace import AHEAD_S, WRAP, _time_namespaces
from trainprobe.sidecar.act.pidproc import open_proc, stat_fields
from trainprobe.sidecar.act.procs import (
    mono_ahead_ns,
    pid_alive,
    proc_start_ticks,
    proc_stopped,
    sigterm_caught,
)
from trainprobe.sidecar.act.signals import CAUGHT_SIGTERM_GRACE_S, terminate

# A hung rank whose framework caught SIGTERM: the handler runs and only sets a flag.
IGNORES_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: None)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


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


# The main thread ends (pthread_exit, as a C extension or an embedded runtime may
# do) while another thread runs: the kernel shows the leader as a zombie ("Z"),
# yet the process, its memory and its GPU context live on.
LEADER_EXITS = (
    "import ctypes, threading, time\n"
    "threading.Thread(target=time.sleep, args=(60,)).start()\n"
    "print('ready', flush=True)\n"
    "ctypes.CDLL(None).pthread_exit(None)\n"
)


def test_a_process_whose_main_thread_exited_is_alive_while_a_thread_runs() -> None:
    child = _started(LEADER_EXITS)
    try:
        wait_for(lambda: stat_fields(child.pid)[:1] == [b"Z"], 10, 0.01, "the leader's exit")
        assert child.poll() is None  # not reapable: the process has not exited
        assert pid_alive(child.pid)
        proc = open_proc(child.pid)
        assert proc is not None and proc.alive()
        proc.fd, fd = -1, proc.fd  # the /proc reading, as where pidfds are missing
        assert proc.alive()
        proc.fd = fd
        proc.close()
        out = asyncio.run(terminate(child.pid, grace_s=5.0, start_ticks=proc.start_ticks))
        assert out.exited and out.signals[:1] == ["SIGTERM"], out
        assert child.wait(5) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)


def _started(code: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    if "ready" in code:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def test_a_caught_sigterm_is_followed_by_sigkill_without_waiting_out_the_grace() -> None:
    child = _started(IGNORES_SIGTERM)
    try:
        assert sigterm_caught(child.pid) is True
        ticks = proc_start_ticks(child.pid)
        out = asyncio.run(terminate(child.pid, grace_s=5.0, start_ticks=ticks))
        assert out.exited and out.sigterm_caught
        assert out.signals == ["SIGTERM", "SIGCONT", "SIGKILL"]
        assert CAUGHT_SIGTERM_GRACE_S <= out.seconds < 2.0, out
        assert child.wait(5) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()


def test_an_uncaught_sigterm_ends_the_process_and_no_sigkill_follows() -> None:
    child = _started("import time; time.sleep(60)")
    try:
        # Python leaves SIGTERM at its default action unless a handler is set.
        wait_for(lambda: sigterm_caught(child.pid) is False, 10, 0.01, "the status file")
        out = asyncio.run(terminate(child.pid, grace_s=5.0))
        assert out.exited and not out.sigterm_caught and out.signals == ["SIGTERM", "SIGCONT"]
        assert child.wait(5) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def test_mono_ahead_is_the_time_namespace_offset_the_kernel_keeps() -> None:
    if _time_namespaces():
        pytest.skip(_time_namespaces())
    assert mono_ahead_ns(os.getpid()) == 0
    child = subprocess.Popen([*WRAP, "sleep", "30"])
    try:
        # unshare execs sleep once the namespace is set: until then it reads as ours.
        wait_for(lambda: mono_ahead_ns(child.pid) != 0, 10, 0.01, "the time namespace")
        assert mono_ahead_ns(child.pid) == AHEAD_S * 1_000_000_000
    finally:
        child.kill()
        child.wait()
    assert mono_ahead_ns(child.pid) == 0  # gone: nothing to say
