"""``trainprobe run --replicas N``: ``command`` (the command line and the
launcher), ``groups`` (replica groups started, watched, restarted alone) and
``lighthouse`` (torchft's lighthouse on a port it binds itself).

It may import the leaves at the top of ``cli/``. Its modules are imported by
path.
"""

__all__: list[str] = []
