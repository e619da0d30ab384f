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

The outside readers (2 and 3) and the stack file's rules are
``outside_stacks.py``; :func:`find_py_spy`, :func:`open_stack_file`,
:func:`proc_uid` and :func:`remove_stack_file` are importable from here too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from trainprobe.proto import probe_pb2, runtime_dir
from trainprobe.sidecar.act.outside_stacks import (
    find_py_spy,
    open_stack_file,
    proc_uid,
    read_faulthandler,
    read_py_spy,
    remove_stack_file,
)
from trainprobe.sidecar.act.procs import pid_alive, proc_start_ticks, proc_stopped, protected_pid
from trainprobe.sidecar.core.judge.stackframes import stuck_at
from trainprobe.sidecar.core.session.model import WorkerState
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
#: A reporter this many intervals (and at least SILENT_MIN_S) late is not
#: running: the in-process request is asked last.
SILENT_INTERVALS = 3
SILENT_MIN_S = 1.0


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
        return await read_py_spy(
            self.py_spy, self.py_spy_setting, state.hello.pid, self.py_spy_timeout_s, attempts
        )

    async def _faulthandler(
        self, state: WorkerState, attempts: list[dict[str, str]], signals: bool
    ) -> tuple[str, str, str] | None:
        return await read_faulthandler(
            state, attempts, signals, self.stack_dirs, self.signal_wait_s
        )
