"""Reading a rank's Python stacks before acting on it, by whatever way works.

1. **in-process**: the DumpStacks command over the worker's own stream; its
   reporter thread answers with ``sys._current_frames()`` and the Flight
   Recorder's in-flight entries. Needs the GIL, so it gets ``timeout_s``.
2. **py-spy**: ``py-spy dump --pid P --nonblocking`` reads the stacks from the
   process's memory; works on a process holding the GIL in C or stopped by
   SIGSTOP, but needs ptrace permission (root, or ``CAP_SYS_PTRACE`` in a
   container). ``--nonblocking`` never pauses the process.
3. **faulthandler**: the signal the hook armed (announced in its Hello); the
   C handler writes every thread's stack to a file without the GIL. It cannot
   run in a stopped process.

2 and 3 need the process in this sidecar's PID namespace, and its pid
verified by the kernel (an identity ticket); 3 also needs an action to be
allowed (no signal in a dry run or for observe). Each record says
which method worked and why the others did not. The order adapts to what the
process can do: a stopped process (state ``T`` in ``/proc``) gets py-spy only,
and one whose reporter has missed several reports (a C call holding the GIL)
is asked in-process last, so neither case waits out the in-process timeout
before the action.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

from trainprobe.proto import probe_pb2, runtime_dir
from trainprobe.sidecar.act.procs import pid_alive, proc_start_ticks, proc_stopped, protected_pid
from trainprobe.sidecar.core.model import WorkerState
from trainprobe.sidecar.core.stackframes import stuck_at
from trainprobe.sidecar.transport.commander import Commander

__all__ = [
    "MAX_STACK_CHARS",
    "StackCollector",
    "find_py_spy",
    "open_stack_file",
    "proc_uid",
    "remove_stack_file",
]

#: Longest stack text an incident keeps per rank (the main thread comes first).
MAX_STACK_CHARS = 16_000
#: Longest Flight Recorder JSON an incident keeps per rank.
MAX_FR_CHARS = 32_000
#: Most bytes read from a faulthandler stack file per dump.
MAX_STACK_FILE_BYTES = 1 << 20
#: A reporter this many intervals (and at least SILENT_MIN_S) late is not
#: running: the in-process request is asked last.
SILENT_INTERVALS = 3
SILENT_MIN_S = 1.0


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


def _flight_recorder(raw: str) -> object:
    if not raw:
        return None
    if len(raw) > MAX_FR_CHARS:
        return {"truncated": True, "json": raw[:MAX_FR_CHARS]}
    try:
        return json.loads(raw)
    except ValueError:
        return {"unparsed": raw[:MAX_FR_CHARS]}


class StackCollector:
    """Gets one rank's stacks: in-process, py-spy, faulthandler, in an order that
    suits the process's state (see the module docstring)."""

    def __init__(
        self,
        commander: Commander,
        timeout_s: float = 1.0,
        py_spy: str = "auto",
        py_spy_timeout_s: float = 5.0,
        signal_wait_s: float = 1.0,
    ) -> None:
        self.commander = commander
        self.timeout_s = timeout_s
        self.py_spy = find_py_spy(py_spy)
        self.py_spy_setting = py_spy
        self.py_spy_timeout_s = py_spy_timeout_s
        self.signal_wait_s = signal_wait_s
        #: Where hooks keep their stack files: the directories of this sidecar's
        #: sockets (the server adds them), and the runtime directory.
        self.socket_dirs: list[Path] = []

    @property
    def stack_dirs(self) -> list[Path]:
        return [*self.socket_dirs, runtime_dir()]

    async def collect(
        self, state: WorkerState, signals: bool = True, flight_recorder: bool = True
    ) -> dict[str, object]:
        """The record of one rank: method, stacks, where, flight_recorder, attempts.

        Reads from outside (py-spy, the faulthandler signal) only a process
        whose pid was verified (``state.local``); sends the signal only when
        ``signals`` (an action is allowed: not a dry run, not observe).
        ``flight_recorder=False`` asks for the stacks only (a waiting peer's
        evidence round: its in-flight entries add nothing to the diagnosis).
        """
        t0 = time.monotonic()
        attempts: list[dict[str, str]] = []
        here = state.local and self._same_process(state)
        if here and proc_stopped(state.hello.pid):
            # Only py-spy reads a stopped process; waiting for an answer would
            # only delay the kill by the in-process timeout.
            stopped = "process is stopped (SIGSTOP): none of its threads can run"
            attempts.append({"method": "in-process", "error": stopped})
            found = await self._py_spy(state, attempts)
            if found is None:
                attempts.append({"method": "faulthandler", "error": stopped})
        elif here and self._silent(state, t0):
            # No report for several intervals: the reporter thread cannot run
            # (a C call holding the GIL), so ask it last.
            found = (
                await self._py_spy(state, attempts)
                or await self._faulthandler(state, attempts, signals)
                or await self._in_process(state, attempts, flight_recorder)
            )
        else:
            found = await self._in_process(state, attempts, flight_recorder)
            if found is None and not state.local:
                why = "pid not verified on this host (no identity ticket); not read from outside"
                attempts.append({"method": "py-spy/faulthandler", "error": why})
            elif found is None and not here:
                attempts.append({"method": "py-spy/faulthandler", "error": "process is gone"})
            elif found is None:
                found = await self._py_spy(state, attempts) or await self._faulthandler(
                    state, attempts, signals
                )
        method, text, fr = found if found is not None else ("", "", "")
        return {
            "method": method,
            "seconds": round(time.monotonic() - t0, 3),
            "where": stuck_at(text, (state.hello.thread_id, state.hello.thread_native_id)),
            "stacks": text[:MAX_STACK_CHARS],
            "truncated": len(text) > MAX_STACK_CHARS,
            "flight_recorder": _flight_recorder(fr),
            "attempts": attempts,
        }

    @staticmethod
    def _silent(state: WorkerState, now: float) -> bool:
        """Whether the worker's reporter has missed several reports in a row."""
        interval_s = state.hello.interval_ms / 1000.0
        return now - state.last_report_at > max(SILENT_INTERVALS * interval_s, SILENT_MIN_S)

    def _same_process(self, state: WorkerState) -> bool:
        """Whether the verified process still runs under its pid (and is not one
        this sidecar must never touch)."""
        pid = state.hello.pid
        if protected_pid(pid) or not pid_alive(pid):
            return False
        ticks = state.proc_start_ticks
        return ticks is not None and proc_start_ticks(pid) == ticks

    async def _in_process(
        self, state: WorkerState, attempts: list[dict[str, str]], flight_recorder: bool = True
    ) -> tuple[str, str, str] | None:
        if not self.commander.connected(state.key):
            attempts.append({"method": "in-process", "error": "worker is not connected"})
            return None
        result = await self.commander.request(
            state.key,
            self.timeout_s,
            dump_stacks=probe_pb2.DumpStacks(include_flight_recorder=flight_recorder),
        )
        if result is None:
            error = f"no answer within {self.timeout_s:g}s (GIL held, or process stopped)"
        elif not result.ok or not result.python_stacks:
            error = result.error or "empty answer"
        else:
            return result.method or "in-process", result.python_stacks, result.flight_recorder_json
        attempts.append({"method": "in-process", "error": error})
        return None

    async def _py_spy(
        self, state: WorkerState, attempts: list[dict[str, str]]
    ) -> tuple[str, str, str] | None:
        if not self.py_spy:
            why = "py_spy=off" if self.py_spy_setting == "off" else "py-spy is not installed"
            attempts.append({"method": "py-spy", "error": why})
            return None
        cmd = [self.py_spy, "dump", "--pid", str(state.hello.pid), "--nonblocking"]
        cmd.append("--full-filenames")
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
        except OSError as err:
            attempts.append({"method": "py-spy", "error": f"cannot run {self.py_spy}: {err}"})
            return None
        try:
            out, stderr = await asyncio.wait_for(proc.communicate(), self.py_spy_timeout_s)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            why = f"timed out after {self.py_spy_timeout_s:g}s"
            attempts.append({"method": "py-spy", "error": why})
            return None
        text = out.decode(errors="replace")
        if proc.returncode == 0 and text.strip():
            return "py-spy", text, ""
        # py-spy's error is its first line (the rest is a Rust backtrace).
        first = (stderr.decode(errors="replace").strip().splitlines() or ["no output"])[0]
        attempts.append({"method": "py-spy", "error": f"exit {proc.returncode}: {first}"})
        return None

    async def _faulthandler(
        self, state: WorkerState, attempts: list[dict[str, str]], signals: bool
    ) -> tuple[str, str, str] | None:
        signum, path = state.hello.stack_signal, state.hello.stack_file
        if not signum or not path:
            attempts.append({"method": "faulthandler", "error": "the hook armed no signal"})
            return None
        if not signals:
            why = "no signal is sent when no action is allowed (dry run, or observe)"
            attempts.append({"method": "faulthandler", "error": why})
            return None
        try:
            fd = open_stack_file(path, state.uid, self.stack_dirs)
        except OSError as err:
            attempts.append({"method": "faulthandler", "error": f"stack_file refused: {err}"})
            return None
        try:
            return await self._signal_and_read(state, fd, signum, attempts)
        finally:
            os.close(fd)

    async def _signal_and_read(
        self, state: WorkerState, fd: int, signum: int, attempts: list[dict[str, str]]
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
        deadline = time.monotonic() + self.signal_wait_s
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
        attempts.append(
            {"method": "faulthandler", "error": f"no stacks within {self.signal_wait_s:g}s"}
        )
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
