"""Command lines: ``trainprobe-sidecar`` (:mod:`.sidecar`) and ``trainprobe``
(:mod:`.ctl`, with ``trainprobe top`` in :mod:`.top`). Each is imported only by
its own entry point: ``trainprobe status`` never loads the server."""

__all__: list[str] = []
