"""A tree kill signals only the descendants the worker could signal itself.

The red team's case, for real (as root, as a sidecar often runs): a worker of
an unprivileged uid (65534, through ``setpriv``) starts a plain child and a
setuid-root helper that calls ``setresuid(0, 0, 0)``, as ``sudo``, ``su`` and
``pkexec`` do. The worker's own ``kill(helper, 0)`` fails with EPERM, so the
root sidecar's kill must not touch the helper (no SIGSTOP, SIGTERM, SIGCONT or
SIGKILL), while it ends the worker and its plain child as before. The helper
catches SIGTERM and SIGCONT and notes each in a file; SIGSTOP and SIGKILL
would show as a stopped or dead helper.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pytest

from tests.support import PYTHON, SidecarProcess, child_env, short_tmpdir, wait_for
from trainprobe.sidecar.act.creds import Creds
from trainprobe.sidecar.act.pidproc import open_proc
from trainprobe.sidecar.act.procs import pid_alive, proc_start_ticks
from trainprobe.sidecar.act.signals import terminate

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: real uids")

NOBODY = 65534

HELPER_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static int note;
static void caught(int sig) { char c = sig == SIGTERM ? 'T' : 'C'; write(note, &c, 1); }
int main(int argc, char **argv) {
    if (argc < 2 || setresuid(0, 0, 0) != 0) { puts("no-setuid"); return 1; }
    note = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
    signal(SIGTERM, caught);
    signal(SIGCONT, caught);
    puts("root");
    fflush(stdout);
    for (;;) pause();
}
"""

#: Run as the worker's uid: a plain child, then the helper; prints both pids.
WORKER = """
import subprocess, sys, time
child = subprocess.Popen(['sleep', '3600'])
helper = subprocess.Popen(sys.argv[1:3], stdout=subprocess.PIPE, text=True)
print(child.pid, helper.pid, helper.stdout.readline().strip(), flush=True)
time.sleep(3600)
"""


@pytest.fixture
def helper() -> Iterator[tuple[Path, Path]]:
    """A setuid-root helper and the file it notes caught signals in, in a
    directory the worker's uid can enter (the helper's own is mode 4755)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc for the setuid helper")
    d = Path(tempfile.mkdtemp(prefix="tp-suid-", dir="/tmp"))
    try:
        os.chmod(d, 0o755)
        src = d / "helper.c"
        src.write_text(HELPER_C)
        subprocess.run(["gcc", "-O", "-o", str(d / "helper"), str(src)], check=True, timeout=120)
        os.chmod(d / "helper", 0o4755)
        yield d / "helper", d / "signals"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def state(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def uids(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(x) for x in line.split()[1:]]
    return []


def test_a_setuid_root_helper_of_an_unprivileged_worker_gets_no_signal(
    helper: tuple[Path, Path],
) -> None:
    binary, notes = helper
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    worker = subprocess.Popen(
        [*setpriv, PYTHON, "-c", WORKER, str(binary), str(notes)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    child = helper_pid = 0
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline().split()
        if line[2:] == ["no-setuid"]:
            pytest.skip("setuid does not take here (a nosuid filesystem)")
        child, helper_pid, said = int(line[0]), int(line[1]), line[2]
        assert said == "root" and uids(helper_pid) == [0, 0, 0, 0]
        assert uids(worker.pid)[:2] == [NOBODY, NOBODY] and uids(child)[:2] == [NOBODY, NOBODY]
        # The kernel's own answer for the worker's uid: EPERM on the helper.
        probe = f"import os\ntry: os.kill({helper_pid}, 0)\nexcept PermissionError: print('EPERM')"
        asked = subprocess.run([*setpriv, PYTHON, "-c", probe], capture_output=True, text=True)
        assert asked.stdout.strip() == "EPERM", asked

        out = asyncio.run(terminate(worker.pid, 1.0, proc_start_ticks(worker.pid)))

        assert out.exited and not out.error, out
        worker.wait(5)
        # The plain child of the worker's own uid: ended with it, as before.
        kids = {c["pid"]: c for c in out.children}
        assert set(kids) == {child}, out.children
        assert kids[child]["signals"][:3] == ["SIGSTOP", "SIGTERM", "SIGCONT"]
        wait_for(lambda: not pid_alive(child), 5, what="the plain child gone")
        # The helper: listed as left alone, and why; 0 signals reached it.
        (left,) = out.skipped
        assert left["pid"] == helper_pid and left["signals"] == [], left
        assert "uid 0" in str(left["reason"]) and f"uid {NOBODY}" in str(left["reason"]), left
        assert pid_alive(helper_pid) and state(helper_pid) not in ("T", "t")
        assert notes.read_bytes() == b"", "the helper caught a signal from the kill"
    finally:
        worker.kill()
        worker.wait()
        for pid in (child, helper_pid):
            if pid and pid_alive(pid):
                os.kill(pid, 9)


def test_a_root_worker_may_end_a_descendant_of_another_uid() -> None:
    """The choice for a worker with CAP_KILL (root): it could signal any
    process of its user namespace itself, so the tree kill ends them all."""
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    code = (
        "import subprocess, sys, time\n"
        f"c = subprocess.Popen({[*setpriv, 'sleep', '3600']!r})\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(3600)\n"
    )
    root = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert root.stdout is not None
        child = int(root.stdout.readline())
        wait_for(lambda: uids(child)[:1] == [NOBODY], 10, what="the child as nobody")
        out = asyncio.run(terminate(root.pid, 1.0, proc_start_ticks(root.pid)))
        assert out.exited and not out.error and out.skipped == [], out
        assert [c["pid"] for c in out.children] == [child], out.children
        wait_for(lambda: not pid_alive(child), 5, what="the child of another uid gone")
    finally:
        root.kill()
        root.wait()
        if child and pid_alive(child):
            os.kill(child, 9)


#: A hooked rank (as the worker's uid) that starts the helper, then hangs.
HOOKED = """
import subprocess, sys, time
from trainprobe.hooks import LivenessProbeHook
hook = LivenessProbeHook(interval_ms=100, job_id="suid-helper", rank=0, world_size=1)
helper = subprocess.Popen(sys.argv[1:3], stdout=subprocess.PIPE, text=True)
said = helper.stdout.readline().strip()
for step in range(1, 11):
    time.sleep(0.05)
    hook.on_step_end(step)
print(helper.pid, said, flush=True)
time.sleep(3600)
"""


#: A hang found 2 s after the last step, killed at once.
FAST = ("--stall-timeout-s", "2", "--hang-patience-s", "0", "--kill-grace-s", "1")
FAST += ("--py-spy", "off")


@contextlib.contextmanager
def hooked_rank(target: str, helper: tuple[Path, Path]) -> Iterator[tuple[Popen[str], int]]:
    """The hooked rank, as uid 65534, connected to ``target``, and its helper's pid."""
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    rank = subprocess.Popen(
        [*setpriv, PYTHON, "-c", HOOKED, *map(str, helper)],
        env=child_env(TRAINPROBE_TARGET=target, HOME="/tmp"),
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    helper_pid = 0
    try:
        assert rank.stdout is not None
        line = rank.stdout.readline().split()
        if line[1:] == ["no-setuid"]:
            pytest.skip("setuid does not take here (a nosuid filesystem)")
        helper_pid = int(line[0])
        yield rank, helper_pid
    finally:
        rank.kill()
        rank.wait()
        if helper_pid and pid_alive(helper_pid):
            os.kill(helper_pid, 9)


def open_dir() -> Path:
    """A sidecar's directory that the rank's uid may enter (``--socket-access all``)."""
    workdir = short_tmpdir()
    os.chmod(workdir, 0o755)
    return workdir


def left_alone(out: dict, helper_pid: int, notes: Path) -> None:
    """The kill's outcome lists the helper as left alone, and it got no signal."""
    assert out["exited"] and out.get("children", []) == [], out
    (left,) = out["skipped"]
    assert left["pid"] == helper_pid and left["name"] == "helper", left
    assert "real uid 0" in left["reason"] and f"real uid {NOBODY}" in left["reason"], left
    assert pid_alive(helper_pid) and state(helper_pid) not in ("T", "t")
    assert notes.read_bytes() == b""


def test_a_real_sidecar_kill_lists_the_helper_it_left_alone(helper: tuple[Path, Path]) -> None:
    """End to end: a root sidecar kills a hung, verified rank of uid 65534;
    its action record (what ``trainprobe incidents`` reads) lists the helper
    under ``skipped``, with why, and the helper got no signal."""
    sc = SidecarProcess(open_dir(), *FAST, "--socket-access", "all")
    with sc, hooked_rank(sc.target, helper) as (rank, helper_pid):
        rank.wait(25)  # the sidecar's kill
        action = wait_for(
            lambda: next(iter(sc.incidents("action")), None), 10, what="the action record"
        )
        out = action["outcomes"]["0"]
        assert out["method"] == "signal", out
        left_alone(out, helper_pid, helper[1])
        # What an operator reads: the incident's timeline names it and why.
        ctl = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "incidents"]
        shown = subprocess.run(
            [*ctl, action["incident_id"], "--log", str(sc.incident_log)],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        says = f"pid {helper_pid} (helper) alone: real uid 0, saved 0; the worker's real uid"
        assert f"rank 0's descendant {says} {NOBODY}" in shown.stdout, shown


def test_a_relay_node_kill_leaves_the_helper_and_the_upstream_lists_it(
    helper: tuple[Path, Path],
) -> None:
    """The same rank behind a relay node: the node signals (it verified the
    pid), and the upstream's action record lists what the node left alone."""
    up = SidecarProcess(short_tmpdir("tpup-"), *FAST)
    node = SidecarProcess(open_dir(), "--relay-to", up.target, "--socket-access", "all")
    with up, node, hooked_rank(node.target, helper) as (rank, helper_pid):
        rank.wait(30)  # the node's kill, ordered by the upstream
        action = wait_for(
            lambda: next(iter(up.incidents("action")), None), 10, what="the action record"
        )
        out = action["outcomes"]["0"]
        assert out["method"] == "relay-signal", out
        left_alone(out, helper_pid, helper[1])


def test_a_process_that_changed_its_uid_after_our_stop_is_resumed_and_left_alone() -> None:
    """The race the check before every signal closes: a descendant passed the
    check and was stopped, then (in the instant before the stop) took another
    uid. Its next signal is refused; our stop is undone with one SIGCONT, and
    nothing else reaches it. Made for real: a root ``sleep`` stopped through
    its pidfd, then judged with a worker of uid 65534's credentials."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        proc = open_proc(sleeper.pid, proc_start_ticks(sleeper.pid))
        assert proc is not None
        assert proc.signal(signal.SIGSTOP)
        wait_for(lambda: state(sleeper.pid) in ("T", "t"), 5, what="stopped")
        proc.sender = Creds(NOBODY, NOBODY, NOBODY, cap_kill=False)
        assert not proc.signal(signal.SIGTERM)
        assert proc.signals == ["SIGSTOP", "SIGCONT"] and "real uid 0" in proc.skipped
        wait_for(lambda: state(sleeper.pid) not in ("T", "t"), 5, what="resumed")
        assert not proc.signal(signal.SIGKILL) and proc.signals == ["SIGSTOP", "SIGCONT"]
        assert sleeper.poll() is None
        assert proc.record()["reason"] == proc.skipped
        proc.close()
    finally:
        sleeper.kill()
        sleeper.wait()
