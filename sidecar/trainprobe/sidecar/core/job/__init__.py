"""A job seen whole across sidecars: this sidecar's ranks plus the summaries the
others share, the job coordinator's versioned rank store, and the bounded
digest a healthy job syncs instead, and the coordinator's own verdict on a job
too large to send whole.

It may import ``session``, ``judge``, the modules at the top of ``core/`` and
the standard library, nothing else: tests/test_import_cycles.py checks it.
"""

from typing import TYPE_CHECKING

from trainprobe.sidecar.core.lazy import lazy_exports

if TYPE_CHECKING:
    from trainprobe.sidecar.core.job.view import (
        CoordinatorState,
        EpisodeNote,
        JobVerdict,
        JobView,
        SyncReply,
        aged,
        analyze_job,
        merge_summaries,
    )

__all__ = [
    "CoordinatorState",
    "EpisodeNote",
    "JobVerdict",
    "JobView",
    "SyncReply",
    "aged",
    "analyze_job",
    "merge_summaries",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CoordinatorState": "view",
        "EpisodeNote": "view",
        "JobVerdict": "view",
        "JobView": "view",
        "SyncReply": "view",
        "aged": "view",
        "analyze_job": "view",
        "merge_summaries": "view",
    },
)
