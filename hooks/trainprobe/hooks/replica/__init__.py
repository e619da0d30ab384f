"""Replicated training's internals: ``replicate`` (a DDP loop made
replicated, torchft's manager and comm hook) and ``watch`` (the hook's
report of its replica group).

It may import ``watch/``, ``startup/``, ``report/`` and the top-level
``trainprobe.hooks.torchft`` and ``trainprobe.hooks.replicated_optim``:
tests/test_import_cycles.py checks it. ``replicate`` is re-exported by
``trainprobe.hooks``.
"""

__all__: list[str] = []
