"""A kill ends the culprit's whole process tree: real processes, real signals.

The DataLoader case is the red team's: a rank killed while its DataLoader
worker was stuck left that worker alive, re-parented to init (on a GPU it holds
its CUDA context). Here a real sidecar kills a real hooked rank whose real
DataLoader worker is stuck after starting a helper (a grandchild), and no
process of the tree may outlive the kill.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

from tests.support import PYTHON, REPO, child_env, sidecar, wait_for
from trainprobe.sidecar.act.procs import pid_alive, proc_start_ticks
from trainprobe.sidecar.act.signals import terminate

LOADER = REPO / "tests" / "workers" / "loader_hang.py"


def marked(marker: str) -> list[int]:
    """Live (non-zombie) pids whose command line carries ``marker``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd and pid_alive(int(name)):
            out.append(int(name))
    return out


def tree_script(marker: str) -> str:
    """A root whose child ignores SIGTERM and starts a grandchild; every process
    of it carries ``marker`` in its command line."""
    sleeper = f"import time; time.sleep(3600)  # {marker}"
    child = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"g = subprocess.Popen([sys.executable, '-c', {sleeper!r}])\n"
        "print(g.pid, flush=True)\n"
        f"time.sleep(3600)  # {marker}\n"
    )
    return (
        "import subprocess, sys, time\n"
        f"c = subprocess.Popen([sys.executable, '-c', {child!r}],\n"
        "                      stdout=subprocess.PIPE, text=True)\n"
        "g = c.stdout.readline().strip()\n"
        "print(c.pid, g, flush=True)\n"
        f"time.sleep(3600)  # {marker}\n"
    )


def test_terminate_ends_children_and_grandchildren_and_lists_them() -> None:
    marker = f"tp-tree-{uuid.uuid4().hex[:8]}"
    root = subprocess.Popen([PYTHON, "-c", tree_script(marker)], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None
        child, grandchild = (int(x) for x in root.stdout.readline().split())
        assert len(marked(marker)) == 3
        out = asyncio.run(terminate(root.pid, 2.0, proc_start_ticks(root.pid)))
        assert out.exited and not out.error, out
        assert out.signals[:2] == ["SIGTERM", "SIGCONT"]
        kids = {c["pid"]: c for c in out.children}
        assert set(kids) == {child, grandchild}, out.children
        assert kids[child]["ppid"] == root.pid and kids[grandchild]["ppid"] == child
        assert all(c["exited"] for c in out.children)
        # Stopped while the tree was read; the child ignored SIGTERM, so SIGKILL.
        assert kids[child]["signals"] == ["SIGSTOP", "SIGTERM", "SIGCONT", "SIGKILL"]
        assert kids[grandchild]["signals"][:3] == ["SIGSTOP", "SIGTERM", "SIGCONT"]
        root.wait(5)
        wait_for(lambda: not marked(marker), 10, what="no orphan left")
    finally:
        root.kill()
        root.wait()
        for pid in marked(marker):
            os.kill(pid, 9)


def test_a_root_that_keeps_forking_leaves_nothing_behind() -> None:
    """Races: the root forks a new child every few ms while it is being killed.
    Each process is stopped before its children are read, and the passes go on
    until one finds nobody new, so none of them survives."""
    marker = f"tp-fork-{uuid.uuid4().hex[:8]}"
    sleeper = f"import time; time.sleep(3600)  # {marker}"
    code = (
        "import subprocess, sys, time\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        f"    subprocess.Popen([sys.executable, '-c', {sleeper!r}])\n"
        "    time.sleep(0.005)\n"
    )
    root = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None and root.stdout.readline().strip() == "ready"
        wait_for(lambda: len(marked(marker)) >= 5, 20, what="a few children")
        out = asyncio.run(terminate(root.pid, 1.0, proc_start_ticks(root.pid)))
        assert out.exited and len(out.children) >= 5
        root.wait(5)
        time.sleep(0.5)  # a straggler would have shown by now
        assert marked(marker) == [], "a child of the killed root survived"
    finally:
        root.kill()
        root.wait()
        for pid in marked(marker):
            os.kill(pid, 9)


def test_without_the_tree_the_children_are_left_as_before() -> None:
    """The control: terminate(tree=False) is the old kill, and it orphans."""
    marker = f"tp-notree-{uuid.uuid4().hex[:8]}"
    root = subprocess.Popen([PYTHON, "-c", tree_script(marker)], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None
        child, grandchild = (int(x) for x in root.stdout.readline().split())
        out = asyncio.run(terminate(root.pid, 2.0, proc_start_ticks(root.pid), tree=False))
        assert out.exited and out.children == []
        root.wait(5)
        assert pid_alive(child) and pid_alive(grandchild)  # orphans
    finally:
        root.kill()
        root.wait()
        for pid in marked(marker):
            os.kill(pid, 9)


def test_a_killed_rank_takes_its_stuck_dataloader_worker_and_its_helper() -> None:
    flags = ("--stall-timeout-s", "2", "--hang-patience-s", "0", "--kill-grace-s", "2")
    with sidecar(*flags) as sc:
        rank = subprocess.Popen(
            [PYTHON, str(LOADER), "loader-hang", "30"],
            env=child_env(TRAINPROBE_TARGET=sc.target),
            stdout=subprocess.PIPE,
            text=True,
        )
        worker = grandchild = 0
        try:
            assert rank.stdout is not None
            assert rank.stdout.readline().startswith("rank ")
            line = rank.stdout.readline().split()
            assert line[0] == "worker", line
            worker, grandchild = int(line[1]), int(line[3])
            assert pid_alive(worker) and pid_alive(grandchild)
            rank.wait(60)  # the sidecar's kill
            action = wait_for(
                lambda: next(
                    (r for r in sc.incidents("action") if r["job_id"] == "loader-hang"), None
                ),
                10,
                what="the action record",
            )
            out = action["outcomes"]["0"]
            assert out["exited"] and out["method"] == "signal", out
            kids = {c["pid"]: c for c in out["children"]}
            assert {worker, grandchild} <= set(kids), out["children"]
            assert kids[worker]["ppid"] == rank.pid and kids[grandchild]["ppid"] == worker
            assert all(c["exited"] for c in out["children"]), out["children"]
            # 0 orphans: nothing the rank started outlives it.
            assert not pid_alive(worker) and not pid_alive(grandchild)
        finally:
            rank.kill()
            rank.wait()
            for pid in (worker, grandchild):
                if pid and pid_alive(pid):
                    os.kill(pid, 9)
