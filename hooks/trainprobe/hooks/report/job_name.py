"""A job's human name: the same on every rank, stable across its restarts.

Job ids are keys, not names: ``127.0.0.1:53719`` under Lightning (a new port
each run), a UUID under ``torchrun --standalone``. The name the hook sends
beside the id is, first match wins:

1. ``TRAINPROBE_JOB_NAME`` or the hook's ``job_name=``, as given;
2. ``TRAINPROBE_JOB_ID`` or ``job_id=``: a job the user named by its id;
3. the script's name and a tag every rank shares:
   - Ray Train's run name, else the Ray job id;
   - a run id the user gave torchrun (``--rdzv-id``; not the UUID that
     ``--standalone`` makes up);
   - ``SLURM_JOB_ID`` (``slurm-<id>``);
   - else the launcher's start time (local time, to the second): torchrun's
     agent (the ranks' parent), or the oldest ancestor that set the same
     ``MASTER_ADDR``/``MASTER_PORT`` (Lightning's rank 0, a spawn's parent).
     Never a rank's own start time, which differs from rank to rank.

The start time is one node's: ranks of a multi-node job without a run id can
get different names on different nodes; give it a name or a run id then.
Characters that are not printable are replaced and the name is cut at :data:`MAX_NAME_CHARS`.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

__all__ = ["MAX_NAME_CHARS", "job_name"]

MAX_NAME_CHARS = 96
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
#: Ancestors looked at, at most, for the launcher.
_MAX_ANCESTORS = 8


def _clean(text: str) -> str:
    # The sidecar refuses a name that is not printable (it would reach terminals).
    return "".join(c if c.isprintable() else "?" for c in text.strip())[:MAX_NAME_CHARS]


def _script() -> str:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if not argv0 or argv0 == "-c":
        return "python"
    path = Path(argv0)
    if path.name == "__main__.py":  # python -m package: the package's name
        return path.parent.name or "python"
    return path.name


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # after "pid (comm) "


def _started_at(pid: int) -> float:
    """The wall time a process started, from /proc (seconds since the epoch)."""
    ticks = int(_stat_fields(pid)[19])  # field 22, starttime, in clock ticks since boot
    btime = next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def _environ(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _launcher_pid() -> int:
    """torchrun's agent; else the oldest ancestor of the same job on this node.

    An ancestor is of the job when it runs our very command line (Lightning's
    rank 0 starts the other ranks with its own argv; a fork keeps it) or
    started with our MASTER_ADDR/MASTER_PORT. /proc shows a process's
    environment as it started, so a launcher that set them itself is found by
    its command line.
    """
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return os.getppid()  # torchrun's agent starts every local rank
    key = (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))
    pid = os.getpid()
    if key[1] is None:
        return pid
    ours = _cmdline(pid)
    for _ in range(_MAX_ANCESTORS):
        parent = int(_stat_fields(pid)[1])
        if parent <= 1:
            break
        try:
            env = _environ(parent)
            same = _cmdline(parent) == ours
        except OSError:
            break
        if not same and (env.get("MASTER_ADDR"), env.get("MASTER_PORT")) != key:
            break
        pid = parent
    return pid


def _tag(ray_run_name: str, ray_job_id: str) -> str:
    if ray_run_name:
        return ray_run_name
    if ray_job_id:
        return f"ray-{ray_job_id}"
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none" and not _UUID.match(run_id):
        return run_id
    slurm = os.environ.get("SLURM_JOB_ID", "")
    if slurm:
        return f"slurm-{slurm}"
    try:
        started = _started_at(_launcher_pid())
    except (OSError, ValueError, IndexError, StopIteration):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))


def job_name(
    name: str | None = None, job_id: str | None = None, ray_run_name: str = "", ray_job_id: str = ""
) -> str:
    """This process's job name (see the module's rule). Never raises."""
    try:
        given = name or os.environ.get("TRAINPROBE_JOB_NAME", "")
        if given.strip():
            return _clean(given)
        named_id = job_id or os.environ.get("TRAINPROBE_JOB_ID", "")
        if named_id.strip():
            return _clean(named_id)
        tag = _tag(ray_run_name, ray_job_id)
        return _clean(f"{_script()} {tag}" if tag else _script())
    except Exception:
        return ""
