"""What a training step measures, on the training thread or beside it.

The step ring (``steps``), gradient syncs and collectives (``sync``,
``sync_window``, ``ddp``, ``collectives``, ``cuda_events``), GPU memory
(``gpu``), Python stacks on the sidecar's signal (``stacks``), and the note a
collective error carries when the sidecar killed a peer (``notices``).

It may import ``trainprobe.proto`` and nothing else of the hooks:
tests/test_import_cycles.py checks it. Its modules are internal; the public
names are re-exported by ``trainprobe.hooks``.
"""

__all__: list[str] = []
