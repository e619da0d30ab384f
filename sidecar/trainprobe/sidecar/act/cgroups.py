"""Whether a process is frozen by a cgroup freezer, read from /proc and cgroupfs.

A scheduler pauses a job by freezing its cgroup: cgroup v2 ``cgroup.freeze``
(systemd, Kubernetes' pod pause, ``docker pause``, Slurm with cgroup v2), or
v1 ``freezer.state``. A frozen process is not "stopped" in ``/proc/<pid>/stat``
(it reads ``S`` under v2 and ``D`` under v1), so the freezer is asked itself:

- v2: the process's cgroup (``0::/path`` in ``/proc/<pid>/cgroup``) under the
  cgroup2 mount; ``cgroup.events`` says ``frozen 1`` once it and every
  descendant are frozen, including by an ancestor's ``cgroup.freeze``;
- v1: its ``freezer`` cgroup under the freezer mount; ``freezer.state`` is
  ``FROZEN`` (or ``FREEZING`` on the way), counting a parent's freeze.

Mount points come from ``/proc/self/mountinfo`` (read once; a path is used only
if it stays below its mount). Paths in ``/proc/<pid>/cgroup`` are relative to
this process's cgroup namespace, as its mounts are. Every read is small and
bounded; the caller runs it in a worker thread.
"""

from __future__ import annotations

import functools
import os

__all__ = ["frozen"]

_READ = 65536


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(_READ).decode(errors="replace")
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def _mounts() -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """((root, mount point) of cgroup2, (root, mount point) of the v1 freezer)."""
    v2 = v1 = None
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        left, sep, right = line.partition(" - ")
        parts, kinds = left.split(), right.split()
        if not sep or len(parts) < 5 or len(kinds) < 3:
            continue
        root, point = parts[3], parts[4].replace("\\040", " ")
        if kinds[0] == "cgroup2" and v2 is None:
            v2 = (root, point)
        elif kinds[0] == "cgroup" and "freezer" in kinds[2].split(",") and v1 is None:
            v1 = (root, point)
    return v2, v1


def _under(mount: tuple[str, str], path: str) -> str | None:
    root, point = mount
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :] or "/"
    full = os.path.normpath(os.path.join(point, path.lstrip("/")))
    return full if full == point or full.startswith(point.rstrip("/") + "/") else None


def frozen(pid: int) -> bool | None:
    """True if ``pid`` is frozen by a cgroup freezer, False if its freezers say
    thawed, None when there is no freezer to ask (or ``pid`` is gone)."""
    text = _read(f"/proc/{pid}/cgroup")
    if text is None:
        return None
    v2, v1 = _mounts()
    answer: bool | None = None
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and not controllers and v2 is not None:
            where = _under(v2, path)
            events = _read(os.path.join(where, "cgroup.events")) if where else None
            if events is not None:
                if "frozen 1" in events.splitlines():
                    return True
                answer = False
        elif "freezer" in controllers.split(",") and v1 is not None:
            where = _under(v1, path)
            state = _read(os.path.join(where, "freezer.state")) if where else None
            if state is not None:
                if state.strip() in ("FROZEN", "FREEZING"):
                    return True
                answer = False
    return answer
