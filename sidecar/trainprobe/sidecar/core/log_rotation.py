"""How a rotated incident log's files are named, and the order they are read in.

The writer (``act/incident_log.py``) moves ``incidents.jsonl`` to
``incidents.jsonl.1``, ``.1`` to ``.2`` and so on; the readers (``trainprobe
incidents`` and ``report``) read the highest number first and the log itself
last. Pure: names in, names out (the callers list the directory).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["in_read_order", "rotated_name"]


def rotated_name(name: str, n: int) -> str:
    """The file name of the ``n``-th newest rotated file of the log ``name``."""
    return f"{name}.{n}"


def in_read_order(name: str, names: Iterable[str]) -> list[str]:
    """Of the file names ``names`` (a directory's), the log ``name``'s set, oldest first:
    its rotated files by number, highest first, then the log itself if it is there."""
    numbered = []
    here = False
    for other in names:
        if other == name:
            here = True
            continue
        head, dot, suffix = other.rpartition(".")
        if dot and head == name and suffix.isascii() and suffix.isdigit():
            numbered.append((int(suffix), other))
    return [n for _, n in sorted(numbered, reverse=True)] + ([name] if here else [])
