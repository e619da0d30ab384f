"""A debugger's stop, as gdb leaves it: attach to every thread of PID with
ptrace (one attach stops one thread: the hook's reporter would go on), wait for
each stop (/proc state ``t``), print "traced", and hold them there until this
process is killed (the kernel then detaches).

Usage: tracer.py PID
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PTRACE_ATTACH = 16
WALL = 0x40000000  # __WALL: the tracee need not be our child


def main() -> int:
    pid = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        if libc.ptrace(PTRACE_ATTACH, tid, None, None) != 0:
            print(f"ptrace {tid}: {os.strerror(ctypes.get_errno())}", flush=True)
            return 1
        os.waitpid(tid, WALL)
    print("traced", flush=True)
    signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
