"""What the Lightning and Hugging Face callbacks share: the start-up watch
that runs before any callback exists (``startup``), the phases a callback
opens and closes (``phases``), and how a callback fails without stopping
training (``guard``).

It sits above the hook (``trainprobe.hooks.liveness``) and below the
callbacks: tests/test_import_cycles.py checks it. Its modules are internal.
"""

__all__: list[str] = []
