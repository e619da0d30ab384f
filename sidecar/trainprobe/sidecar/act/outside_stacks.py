"""Reading a rank's stacks from outside its process, and the stack file's rules.

The in-process request (``stacks.py``) needs the worker's GIL; these need
only the kernel. py-spy reads the process's memory (ptrace permission: root,
or ``CAP_SYS_PTRACE`` in a container) and works on a process stopped or
holding the GIL in C; ``--nonblocking`` never pauses it. The faulthandler
signal makes the hook's C handler write every thread's stack to its stack
file without the GIL, but cannot run in a stopped process.

The stack file's path comes from a client (the worker's Hello), so it is
trusted only as far as the kernel vouches for it: a regular file, not a
symlink, owned by the worker's verified uid, directly in a directory where
hooks keep theirs (:func:`open_stack_file`), and read through the one
descriptor checked. After a kill, the file is removed only as the worker
itself could have (:func:`remove_stack_file`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import sys
import time
from pathlib import Path

from trainprobe.sidecar.act.procs import protected_pid
from trainprobe.sidecar.core.session.model import WorkerState

__all__ = [
    "MAX_STACK_FILE_BYTES",
    "find_py_spy",
    "open_stack_file",
    "proc_uid",
    "read_faulthandler",
    "read_py_spy",
    "remove_stack_file",
]

#: Most bytes read from a faulthandler stack file per dump.
MAX_STACK_FILE_BYTES = 1 << 20


def find_py_spy(setting: str) -> str:
    """The py-spy executable for ``setting`` (``auto``, ``off`` or a path); "" if none."""
    if setting == "off":
        return ""
    if setting != "auto":
        return setting if os.access(setting, os.X_OK) else ""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"  # a venv's bin, not always on PATH
    return str(beside) if os.access(beside, os.X_OK) else ""


async def read_py_spy(
    exe: str, setting: str, pid: int, timeout_s: float, attempts: list[dict[str, str]]
) -> tuple[str, str, str] | None:
    """``py-spy dump --nonblocking`` of process ``pid`` by ``exe`` ("" when none
    was found for ``setting``), as (method, stacks, ""); None with the reason
    added to ``attempts``."""
    if not exe:
        why = "py_spy=off" if setting == "off" else "py-spy is not installed"
        attempts.append({"method": "py-spy", "error": why})
        return None
    cmd = [exe, "dump", "--pid", str(pid), "--nonblocking"]
    cmd.append("--full-filenames")
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
    except OSError as err:
        attempts.append({"method": "py-spy", "error": f"cannot run {exe}: {err}"})
        return None
    try:
        out, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        why = f"timed out after {timeout_s:g}s"
        attempts.append({"method": "py-spy", "error": why})
        return None
    text = out.decode(errors="replace")
    if proc.returncode == 0 and text.strip():
        return "py-spy", text, ""
    # py-spy's error is its first line (the rest is a Rust backtrace).
    first = (stderr.decode(errors="replace").strip().splitlines() or ["no output"])[0]
    attempts.append({"method": "py-spy", "error": f"exit {proc.returncode}: {first}"})
    return None


async def read_faulthandler(
    state: WorkerState,
    attempts: list[dict[str, str]],
    signals: bool,
    dirs: list[Path],
    wait_s: float,
) -> tuple[str, str, str] | None:
    """The stacks the hook's faulthandler writes to its stack file on the signal
    it armed, as (method, stacks, ""); None with the reason added to
    ``attempts``. The file must pass :func:`open_stack_file` against ``dirs``;
    the signal is sent only when ``signals``, and the file read until it stops
    growing, ``wait_s`` at most."""
    signum, path = state.hello.stack_signal, state.hello.stack_file
    if not signum or not path:
        attempts.append({"method": "faulthandler", "error": "the hook armed no signal"})
        return None
    if not signals:
        why = "no signal is sent when no action is allowed (dry run, or observe)"
        attempts.append({"method": "faulthandler", "error": why})
        return None
    try:
        fd = open_stack_file(path, state.uid, dirs)
    except OSError as err:
        attempts.append({"method": "faulthandler", "error": f"stack_file refused: {err}"})
        return None
    try:
        return await _signal_and_read(state, fd, signum, attempts, wait_s)
    finally:
        os.close(fd)


async def _signal_and_read(
    state: WorkerState, fd: int, signum: int, attempts: list[dict[str, str]], wait_s: float
) -> tuple[str, str, str] | None:
    # Sizes and reads go through the descriptor checked above, never the
    # path again: a file swapped in meanwhile is not read.
    protected = protected_pid(state.hello.pid)
    try:
        if protected:
            raise PermissionError(protected)
        start = os.fstat(fd).st_size
        os.kill(state.hello.pid, signum)
    except OSError as err:
        attempts.append({"method": "faulthandler", "error": str(err)})
        return None
    deadline = time.monotonic() + wait_s
    size = start
    # The handler writes in bursts; wait until the file stops growing.
    text = ""
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            now = os.fstat(fd).st_size
            if now > start and now == size:
                break
            size = now
        length = min(os.fstat(fd).st_size - start, MAX_STACK_FILE_BYTES)
        text = os.pread(fd, max(length, 0), start).decode(errors="replace")
    if text.strip():
        return "faulthandler", text, ""
    attempts.append({"method": "faulthandler", "error": f"no stacks within {wait_s:g}s"})
    return None


def open_stack_file(path: str, uid: int, dirs: list[Path]) -> int:
    """A read-only descriptor of a worker's stack file, or OSError saying why not.

    The path comes from a client: it must be a regular file (a FIFO would
    block, a device would never end), not a symlink, owned by the worker's
    verified uid, directly inside one of ``dirs``. Opened non-blocking, so not
    even a FIFO swapped in between the checks can hold the event loop.
    """
    folder = os.path.realpath(os.path.dirname(path))
    if not any(folder == os.path.realpath(d) for d in dirs):
        raise PermissionError(f"{path} is not in the runtime directory")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{path} is not a regular file")
        if st.st_uid != uid:
            raise PermissionError(f"{path} is owned by uid {st.st_uid}, not the worker's {uid}")
    except OSError:
        os.close(fd)
        raise
    return fd


def proc_uid(pid: int) -> int | None:
    """The uid that owns process ``pid`` (its /proc entry), or None."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def remove_stack_file(path: str, pid: int, uid: int | None) -> bool:
    """Remove the faulthandler file of a killed process ``pid`` (the hook's own
    cleanup at exit never ran); True if removed.

    The path comes from the worker's Hello, so it is only trusted this far:
    it must name ``stacks-<pid>.txt`` (validated at Hello), be a regular file
    (never a link), and belong to ``uid``, the uid the process had (read from
    /proc before the kill). A root sidecar thus deletes nothing its worker
    could not have deleted itself.
    """
    if uid is None or not path.endswith(f"/stacks-{pid}.txt"):
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return False
        os.unlink(path)
    except OSError:
        return False
    return True
