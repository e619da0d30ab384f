"""Command lines: ``trainprobe-sidecar`` (:mod:`.sidecar`) and ``trainprobe``
(:mod:`.ctl`). Each is imported only by its own entry point: ``trainprobe
status`` never loads the server."""

__all__: list[str] = []
