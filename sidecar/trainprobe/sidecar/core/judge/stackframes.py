"""Where a rank is stuck, read out of a Python stack dump.

Three dumpers produce three formats, and the sidecar may get any of them:

- the hook's own answer (``traceback.format_stack`` per thread, outermost
  frame first, each thread headed ``Thread 0x... "name" (most recent call last):``);
- ``faulthandler`` (innermost first, ``File "f.py", line 88 in fn``; no thread
  names, the signalled thread is ``Current thread``);
- ``py-spy dump`` (innermost first, ``fn (f.py:88)`` under ``Thread N (idle): "name"``).

:func:`parse_stacks` turns each into :class:`ThreadStack` objects with frames
innermost first; :func:`stuck_at` names the place a human wants: the
training thread's innermost frame in the user's own code, and the innermost
frame of all when that is in a library (``torch``, the standard library).
The training thread is the one the hook names (its Python ident appears in
the hook's and faulthandler's dumps, its OS id in py-spy's); without that,
the thread with the most frames of user code, the main thread first on a tie.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Frame", "ThreadStack", "parse_stacks", "stuck_at", "training_thread"]

_HOOK_HEADER = re.compile(r'^Thread (0x[0-9a-f]+) "(.*)" \(most recent call last\):$')
_HOOK_FRAME = re.compile(r'^  File "(.+)", line (\d+), in (.+)$')
_FH_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")
_FH_FRAME = re.compile(r'^  File "(.+)", line (\d+) in (.+)$')
_SPY_HEADER = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \((\w+)\)(?:: "(.*)")?$')
_SPY_FRAME = re.compile(r"^\s{4}(.+) \((.+):(\d+)\)$")

#: Path parts of code that is not the user's: a frame there is a symptom, not a cause.
_LIBRARY_MARKS = ("site-packages", "dist-packages", "/lib/python", "<frozen", "/trainprobe/")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    #: The source line, where the dump has it (the hook's own; not py-spy's or
    #: faulthandler's): it tells a ``time.sleep`` from a ``lock.acquire``.
    code: str = field(default="", compare=False)

    @property
    def library(self) -> bool:
        return any(mark in self.file for mark in _LIBRARY_MARKS)

    def __str__(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} in {self.function}"


@dataclass(frozen=True)
class ThreadStack:
    """One thread's frames, innermost first."""

    name: str
    frames: tuple[Frame, ...]
    #: py-spy's "active"/"idle"/..., faulthandler's "current"; "" when unknown.
    state: str = ""
    #: The id in the thread's header: a Python ident (hex) or py-spy's OS thread id.
    ident: int = 0

    @property
    def user_frames(self) -> int:
        return sum(not f.library for f in self.frames)

    @property
    def is_main(self) -> bool:
        if self.name:
            return self.name == "MainThread"
        # faulthandler has no names: the main thread is the one running the script.
        return bool(self.frames) and self.frames[-1].function == "<module>"


def parse_stacks(text: str) -> list[ThreadStack]:
    """Every thread found in ``text``, in any of the three formats."""
    threads: list[ThreadStack] = []
    frames: list[Frame] = []
    name, state, reverse, ident = "", "", False, 0

    def flush() -> None:
        if frames or name:
            ordered = tuple(reversed(frames)) if reverse else tuple(frames)
            threads.append(ThreadStack(name, ordered, state, ident))

    started = False
    for line in text.splitlines():
        if m := _HOOK_HEADER.match(line):
            if started:
                flush()
            name, state, frames, reverse, started = m.group(2), "", [], True, True
            ident = int(m.group(1), 16)
        elif m := _FH_HEADER.match(line):
            if started:
                flush()
            state = "current" if m.group(1) == "Current thread" else ""
            name, frames, reverse, started = "", [], False, True
            ident = int(m.group(2), 16)
        elif m := _SPY_HEADER.match(line):
            if started:
                flush()
            name, state, frames, reverse = m.group(3) or "", m.group(2), [], False
            ident, started = int(m.group(1), 0), True
        elif m := _HOOK_FRAME.match(line) or _FH_FRAME.match(line):
            frames.append(Frame(m.group(1), int(m.group(2)), m.group(3)))
        elif reverse and frames and line.startswith("    ") and not frames[-1].code:
            # The hook's (traceback's) source line under its frame.
            last = frames[-1]
            frames[-1] = Frame(last.file, last.line, last.function, line.strip()[:200])
        elif m := _SPY_FRAME.match(line):
            frames.append(Frame(m.group(2), int(m.group(3)), m.group(1)))
    if started:
        flush()
    return threads


def training_thread(threads: list[ThreadStack], ids: tuple[int, ...] = ()) -> ThreadStack | None:
    """The thread whose stack says where training is: the one ``ids`` names,
    else the one with the most user frames (the main thread first on a tie)."""
    threads = [t for t in threads if t.frames]
    named = next((t for t in threads if t.ident and t.ident in ids), None)
    if named is not None:
        return named
    return max(threads, key=lambda t: (t.user_frames, t.is_main), default=None)


def stuck_at(text: str, thread_ids: tuple[int, ...] = ()) -> str:
    """``"train.py:88 in load_batch"``: where the training thread is; "" if unknown.

    ``thread_ids`` are the training thread's ids as the hook announced them.
    When the innermost frame is library code, both are named:
    ``"train.py:88 in step (innermost: distributed_c10d.py:2806 in all_reduce)"``.
    """
    main = training_thread(parse_stacks(text), tuple(i for i in thread_ids if i))
    if main is None:
        return ""
    innermost = main.frames[0]
    user = next((f for f in main.frames if not f.library), None)
    if user is None or user == innermost:
        return str(innermost)
    return f"{user} (innermost: {innermost})"
