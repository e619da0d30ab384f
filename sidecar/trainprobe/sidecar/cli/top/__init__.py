"""``trainprobe top``: ``model`` (what it keeps of every rank between
refreshes), ``view`` (one frame) and ``live`` (fetch, render, read a key).

It may import the leaves at the top of ``cli/``. Its modules are imported by
path.
"""

__all__: list[str] = []
