"""The Ray transport of JobSync: each job's coordinator actor, one call per sync.

:class:`~trainprobe.sidecar.sync.node.JobSync` computes each round; this
sends it: one ``sync`` call per job to the job's coordinator
(:mod:`~trainprobe.sidecar.ray.coordinator`), all in flight at once. The Ray
calls block and run on a thread of their own, bounded by ``timeout_s``; a
dead coordinator is created again at the next round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from trainprobe.sidecar.core.job.view import JobView, SyncReply
from trainprobe.sidecar.ray.coordinator import coordinator
from trainprobe.sidecar.ray.link import RayLink

if TYPE_CHECKING:
    from trainprobe.sidecar.sync.node import Payload

__all__ = ["RayTransport"]

log = logging.getLogger("trainprobe.sidecar")


class RayTransport:
    """Carries JobSync rounds to the jobs' coordinator actors on Ray."""

    def __init__(
        self,
        link: RayLink,
        sidecar_id: str,
        refresh_s: float,
        timeout_s: float = 5.0,
        view: JobView | None = None,
    ) -> None:
        self.link = link
        self.view = view
        self.sidecar_id = sidecar_id
        self.timeout_s = timeout_s
        self._refresh = refresh_s
        self._handles: dict[str, Any] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainprobe-jobsync")
        self._warned: set[str] = set()

    @property
    def ready(self) -> bool:
        return self.link.ready

    def served(self, jobs: Sequence[str]) -> None:
        for ended in self._handles.keys() - set(jobs):  # bounded by the jobs served now
            del self._handles[ended]
            self._warned.discard(ended)

    async def exchange(self, payload: Payload) -> list[tuple[str, SyncReply]]:
        if not payload:
            return []
        loop = asyncio.get_running_loop()
        return list((await loop.run_in_executor(self._pool, self._sync, payload)).items())

    def _sync(self, payload: Payload) -> dict[str, SyncReply]:
        """Blocking: one ``sync`` call per job, all in flight at once."""
        import ray

        refs = {}
        view = self.view
        bounded = view.bounded if view is not None else False
        for job_id, (summaries, note, detail, since) in payload.items():
            if note is not None and note.closed:
                note = None  # a closed note is for an upstream's trace: no coordinator actor traces
            try:
                handle = self._handles.get(job_id) or coordinator(job_id)
                self._handles[job_id] = handle
                refs[job_id] = handle.sync.remote(
                    self.sidecar_id, summaries, note, detail, since, self._refresh, bounded
                )
            except Exception as err:
                self._handles.pop(job_id, None)
                self.warn(job_id, f"{type(err).__name__}: {err}")
        out: dict[str, SyncReply] = {}
        deadline = time.monotonic() + self.timeout_s
        for job_id, ref in refs.items():
            try:
                out[job_id] = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                self._warned.discard(job_id)
            except Exception as err:
                self._handles.pop(job_id, None)  # a dead coordinator is created again
                self.warn(job_id, f"{type(err).__name__}: {err}")
        return out

    def warn(self, job_id: str, reason: str) -> None:
        if job_id not in self._warned:  # once per job until it works again
            self._warned.add(job_id)
            log.warning("job %s: cannot sync with its coordinator on Ray: %s", job_id, reason)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
