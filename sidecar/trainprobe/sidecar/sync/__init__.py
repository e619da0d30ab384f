"""Summary sync: a job's sidecars share their ranks' compact summaries.

Public API (imported on first use):

- :class:`JobSync`: this sidecar's half, whatever carries it (a transport:
  Ray's coordinator actors, :mod:`trainprobe.sidecar.ray.jobsync`; or one
  stream to an upstream sidecar, :class:`StreamTransport`, ``job_sync_to``).
- :class:`JobSyncUpstream`: the ``JobSync`` RPC every sidecar serves, which
  hosts each job's coordinator for the nodes that stream to it.
"""

from trainprobe.sidecar.core.lazy import lazy_exports

__all__ = ["JobSync", "JobSyncUpstream", "StreamTransport"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"JobSync": "node", "JobSyncUpstream": "upstream", "StreamTransport": "link"},
)
