"""``trainprobe report``: ``command`` (sample the sidecar, read the log, write
the page), ``story`` (what the page says in words and marks on its timeline)
and ``page`` (plots and self-contained HTML).

It may import ``incidents/``, ``top/`` and the leaves at the top of ``cli/``.
Its modules are imported by path.
"""

__all__: list[str] = []
