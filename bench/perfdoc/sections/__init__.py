"""The sections of docs/PERFORMANCE.md, one module a group of sections in the
page's order: ``cost``, ``detection``, ``faults``, ``recovery`` (with
``ray_recovery``), ``restart``, ``scale``, ``sessions``, ``pressure``,
``ray_sync``, ``summary_sync``, ``more``. Each turns its result files into lines
and goals.

They import ``perfdoc.core`` (and ``ray_sync`` its plot, ``perfdoc.plotting``),
never the page's assembly (``headlines``, ``document``) or the other plots:
tests/test_import_cycles.py checks it. Modules are imported by path.
"""

__all__: list[str] = []
