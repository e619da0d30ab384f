"""Command lines: ``trainprobe-sidecar`` (:mod:`.sidecar`) and ``trainprobe``
(:mod:`.ctl`). Each is imported only by its own entry point: ``trainprobe
status`` never loads the server. The commands with more than one module have
their own subpackage: ``incidents/``, ``top/``, ``report/``, ``run/``; the
shared leaves (``flags``, ``output``, ``extras``, ``status_text``) sit here."""

__all__: list[str] = []
