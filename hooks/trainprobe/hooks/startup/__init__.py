"""A process's start-up: the phases before its first step (``phases``) and,
under torchrun restarts, the store prefixed by the attempt
(``restart_store``).

It may import ``watch/``: tests/test_import_cycles.py checks it. Its modules
are internal; ``install_restart_prefix`` is re-exported by ``trainprobe.hooks``.
"""

__all__: list[str] = []
