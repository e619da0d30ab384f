"""``trainprobe incidents``: the incident log read back as stories.

``story`` (an incident's records folded into one story, its summary lines),
``timeline`` (one incident record by record), ``log_stream`` (the log and its
rotated files read as a stream, in bounded memory), ``record_shape`` (whether
a record has the shape the readers rely on) and ``history`` (the command
line). It may import the leaves at the top of ``cli/``. Its modules are
imported by path.
"""

__all__: list[str] = []
