"""How a process reaches its sidecar and what it says: who it is
(``identity``, ``job_name``), where the sidecar listens (``target``), the
messages built from what ``watch/`` measured (``messages``), the reporter
thread with its gRPC stream and reconnects (``reporter``, ``stream_session``,
``socket_watch``), the Ray actor handle it registers (``ray_handle``) and
the replica group Ray Train runs it in (``replica_group``).

It may import ``watch/``, ``startup/`` and ``trainprobe.proto``:
tests/test_import_cycles.py checks it. Its modules are internal; the public
names are re-exported by ``trainprobe.hooks``.
"""

__all__: list[str] = []
