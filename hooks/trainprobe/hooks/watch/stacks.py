"""Where this process is: Python stacks, the Flight Recorder, a faulthandler signal.

Three ways for the sidecar to learn where a rank is stuck, from the most to
the least cooperative:

- :func:`format_all_stacks` answers the DumpStacks command from the reporter
  thread (``sys._current_frames``), with :func:`flight_recorder_json` for the
  collectives torch has in flight;
- :class:`StackSignal` arms ``faulthandler`` on a real-time signal: its C
  handler writes every thread's stack to a file *without the GIL*, so the
  sidecar can read stacks even while a C call holds the GIL and the reporter
  thread cannot run;
- (outside the process) ``py-spy dump``, which the sidecar runs itself.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import IO

from trainprobe.proto import STACK_SIGNALS, runtime_dir

__all__ = [
    "STACK_SIGNAL_ENV",
    "StackSignal",
    "flight_recorder_json",
    "format_all_stacks",
    "remove_stale_stack_files",
]

log = logging.getLogger("trainprobe.hooks")

#: Environment variable choosing the faulthandler signal number (0 = off).
STACK_SIGNAL_ENV = "TRAINPROBE_STACK_SIGNAL"
#: Default: a real-time signal, which programs rarely use (glibc keeps the first two).
DEFAULT_STACK_SIGNAL = signal.SIGRTMIN + 6
#: The faulthandler file of process <pid> in the runtime directory.
_STACK_FILE = re.compile(r"stacks-(\d{1,10})\.txt")
#: Most Flight Recorder entries an answer carries (the newest).
MAX_FR_ENTRIES = 64


def format_all_stacks(skip_thread_ids: frozenset[int] = frozenset(), first: int = 0) -> str:
    """Every thread's stack, innermost frame last: ``first`` (the training
    thread), then the main thread, then the others by name."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main_id = threading.main_thread().ident
    frames = sys._current_frames()
    try:
        order = sorted(
            frames, key=lambda tid: (tid != first, tid != main_id, names.get(tid, ""), tid)
        )
        parts = []
        for tid in order:
            if tid in skip_thread_ids:
                continue
            name = names.get(tid, "?")
            parts.append(f'Thread {tid:#x} "{name}" (most recent call last):\n')
            parts.extend(traceback.format_stack(frames[tid]))
        return "".join(parts)
    finally:
        # The dict holds this very frame, which holds the dict: a cycle that kept
        # every thread's frames, and their locals, until the cyclic GC ran. A
        # training thread's torchft allreduce then kept its failed gloo work and
        # the group's sockets open, and a survivor beyond it waited for a quorum.
        frames.clear()


def _keywords(fn: object) -> set[str]:
    """Keyword names of a pybind11 function, read from its signature line."""
    doc = (getattr(fn, "__doc__", "") or "").split("\n", 1)[0]
    return set(re.findall(r"(\w+)\s*:", doc))


def flight_recorder_json() -> str:
    """torch's Flight Recorder entries still in flight, as JSON; "" when there are none.

    Reads ``_dump_nccl_trace_json`` when this torch has it, else the generic
    ``_dump_fr_trace_json`` (gloo records too); the keywords are checked at run
    time because they change between releases. Entries exist only when
    ``TORCH_FR_BUFFER_SIZE`` (formerly ``TORCH_NCCL_TRACE_BUFFER_SIZE``) > 0 was
    set before the process group was created. Never imports torch.
    """
    torch = sys.modules.get("torch")
    c10d = getattr(getattr(torch, "_C", None), "_distributed_c10d", None)
    if c10d is None:
        return ""
    for name in ("_dump_nccl_trace_json", "_dump_fr_trace_json"):
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        wanted = {"includeCollectives": True, "onlyActive": True, "includeStackTraces": False}
        known = _keywords(dump)
        try:
            raw = dump(**{k: v for k, v in wanted.items() if k in known})
            data = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        except Exception as err:
            return json.dumps({"source": name, "error": f"{type(err).__name__}: {err}"})
        entries = [e for e in data.get("entries", ()) if not e.get("retired", False)]
        if not entries:
            return ""
        return json.dumps(
            {
                "source": name,
                "version": data.get("version", ""),
                "pg_config": data.get("pg_config", {}),
                "entries": entries[-MAX_FR_ENTRIES:],
            }
        )
    return ""


def _signal_number() -> int:
    raw = os.environ.get(STACK_SIGNAL_ENV, "").strip()
    if not raw:
        return int(DEFAULT_STACK_SIGNAL)
    try:
        return int(raw)
    except ValueError:
        log.warning("trainprobe: %s=%r is not a signal number; not armed", STACK_SIGNAL_ENV, raw)
        return 0


def remove_stale_stack_files(folder: Path) -> int:
    """Remove this user's ``stacks-<pid>.txt`` files whose process is gone.

    A process that was killed never ran its own cleanup (:meth:`StackSignal.disarm`
    at exit); the sidecar removes the files of the processes it kills, this
    catches the rest (a kill by torchrun, the OOM killer, a user). It runs
    once per hook, when the signal is armed, so the hot path never pays.
    Only files of pids that do not exist in this PID namespace are removed.
    """
    removed = 0
    uid = os.getuid()
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            m = _STACK_FILE.fullmatch(entry.name)
            if m is None or int(m.group(1)) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != uid or _pid_exists(int(m.group(1))):
                    continue
                os.unlink(entry.path)
                removed += 1
    return removed


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, as another user's
        return True
    return True


class StackSignal:
    """``faulthandler`` armed on a signal, writing every thread's stack to a file.

    Armed only when nobody else handles the signal (its disposition is the
    default), so a user's handler is never replaced. The file lives in the
    per-user runtime directory and is removed by :meth:`disarm`. The handler
    is async-signal-safe and needs no GIL: it answers when the reporter
    thread cannot. On a signal whose default action ends the process, the
    sidecar only sends it to processes that announced it in their Hello.
    """

    def __init__(self) -> None:
        self.signum = 0
        self.path = ""
        self._file: IO[str] | None = None

    def arm(self) -> bool:
        """Register the handler; False (and nothing changed) if it cannot be."""
        signum = _signal_number()
        if signum <= 0:
            return False
        if signum not in STACK_SIGNALS:
            # The sidecar refuses any other in a Hello: a stack signal must
            # never be one that stops or ends a process by design.
            log.warning("trainprobe: signal %d is not a real-time signal; not armed", signum)
            return False
        try:
            if signal.getsignal(signum) != signal.SIG_DFL:  # None: a C handler
                log.info("trainprobe: signal %d already handled; no faulthandler stacks", signum)
                return False
            folder = runtime_dir()
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            remove_stale_stack_files(folder)
            path = folder / f"stacks-{os.getpid()}.txt"
            fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the handler
            os.chmod(path, 0o600)
            faulthandler.register(signum, file=fh, all_threads=True, chain=False)
        except (OSError, ValueError, RuntimeError) as err:
            log.debug("trainprobe: faulthandler stacks not armed: %s", err)
            return False
        self.signum, self.path, self._file = signum, str(path), fh
        return True

    def disarm(self) -> None:
        """Unregister the handler and remove the file (idempotent)."""
        if not self.signum:
            return
        with contextlib.suppress(Exception):
            faulthandler.unregister(self.signum)
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        with contextlib.suppress(OSError):
            Path(self.path).unlink()
        self.signum, self.path, self._file = 0, "", None
