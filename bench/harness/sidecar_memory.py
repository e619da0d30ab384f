"""Looking inside a sidecar process's memory, for bench/bench_session_cost.py.

Two sitecustomize payloads the sidecar runs at start (:func:`with_site`),
each dumping at SIGUSR2: ``TRACER``, the Python heap tracemalloc traces and
the lines that grew most since the last dump; ``MALLOCSTATS``, CPython's
allocator figures (``sys._debugmallocstats``), read back by
:func:`pymalloc_figures`. :func:`anon_kinds` splits the resident memory from
/proc/<pid>/smaps into the brk heap, other anonymous mappings and files.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.common import REPO

__all__ = ["MALLOCSTATS", "TRACER", "anon_kinds", "pymalloc_figures", "with_site"]

TRACER = """
import os, signal, tracemalloc, linecache
_FRAMES = int(os.environ.get("TP_TRACE_FRAMES", "1"))
tracemalloc.start(_FRAMES)
_OUT = os.environ["TP_TRACE_OUT"]
_base = [None]

def _dump(signum, frame):
    import gc
    gc.collect()
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen*")])
    top = []
    if _base[0] is not None:
        by = "traceback" if _FRAMES > 1 else "lineno"
        for s in snap.compare_to(_base[0], by)[:int(os.environ.get("TP_TRACE_TOP", "12"))]:
            where = " < ".join(
                f"{f.filename.rsplit('site-packages/', 1)[-1].rsplit('/', 1)[-1]}:{f.lineno}"
                for f in reversed(s.traceback))
            top.append([where, s.size_diff])
    _base[0] = snap
    with open(_OUT, "a") as fh:
        fh.write(repr([tracemalloc.get_traced_memory()[0], top]) + "\\n")

signal.signal(signal.SIGUSR2, _dump)
"""

MALLOCSTATS = """
import gc, os, signal, sys

def _dump(signum, frame):
    gc.collect()
    fd = os.open(os.environ["TP_MALLOC_OUT"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(2)
    os.dup2(fd, 2)  # _debugmallocstats writes to C stderr
    try:
        os.write(2, b"=== stage\\n")
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)

signal.signal(signal.SIGUSR2, _dump)
"""
#: The lines of ``sys._debugmallocstats`` kept, by the name given them here.
PYMALLOC_FIGURES = {
    "# bytes in allocated blocks": "pymalloc_live",
    "# bytes in available blocks": "pymalloc_free_in_pools",
    "unused pools": "pymalloc_empty_pools",
    "# arenas allocated current": "pymalloc_arenas",
}


def pymalloc_figures(text: str) -> dict[str, int]:
    """The last stage's figures from ``_debugmallocstats`` output."""
    last = text.rsplit("=== stage", 1)[-1]  # one stage's dump, or all of them
    out: dict[str, int] = {}
    for line in last.splitlines():
        for label, key in PYMALLOC_FIGURES.items():
            if line.startswith(label) or (label[0] != "#" and label in line):
                out[key] = int(line.rsplit("=", 1)[-1].strip().replace(",", ""))
    return out


def anon_kinds(pid: int) -> dict[str, int]:
    """Resident anonymous memory of ``pid`` by mapping: the brk heap and the rest."""
    out = {"heap": 0, "anon_other": 0, "file": 0}
    kind = "file"
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split(maxsplit=6)
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                name = head[5].strip() if len(head) > 5 else ""
                kind = "heap" if name == "[heap]" else "anon_other" if not name else "file"
            elif head[0] == "Rss:":
                out[kind] += int(head[1]) * 1024
    return out


def with_site(work: Path, code: str, out_env: str) -> tuple[Path, dict[str, str]]:
    """A sitecustomize running ``code`` in the sidecar, which writes to the file it
    gets in ``out_env``: that file, and the sidecar's environment."""
    (work / "site").mkdir()
    (work / "site" / "sitecustomize.py").write_text(code)
    out = work / "stats.txt"
    roots = [str(work / "site")] + [str(REPO / d) for d in ("proto", "hooks", "sidecar")]
    return out, {"PYTHONPATH": os.pathsep.join(roots), out_env: str(out)}
