"""The job-level coordinator: a detached Ray actor per job, found by name.

Each sidecar that serves ranks of a job calls :meth:`JobCoordinator.sync`
every ``job_sync_interval_ms`` with its ranks' compact summaries and its
episode note, and gets back the job's open hang episode and either the
job's digest (bounded in size, whatever the number of nodes) or, while it
asks for them, the other sidecars' ranks that changed since the version it
holds (with their age on the coordinator's clock); past 64 other ranks, its
own verdict on the whole job and the few ranks it names instead, so that an
incident's syncs do not grow with the nodes either. The logic is the
pure :class:`~trainprobe.sidecar.core.job.view.CoordinatorState`; this actor
only holds it. It uses no CPU while the job is healthy, and exits by itself once no sidecar has
synced for ``idle_exit_s`` (60 s), which frees its name.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from trainprobe.sidecar.core.job.digest import REPORTING_REFRESH_S
from trainprobe.sidecar.core.job.view import CoordinatorState, EpisodeNote, SyncReply
from trainprobe.sidecar.core.judge.culprit import RankSummary
from trainprobe.sidecar.ray.naming import RAY_NAMESPACE, is_job_actor_name, job_coordinator_name

__all__ = ["IDLE_EXIT_S", "JobCoordinator", "coordinator", "stop_coordinators"]

log = logging.getLogger("trainprobe.sidecar")
#: A coordinator no sidecar synced with for this long exits: by then all it
#: holds is stale (``stale_after_s``), and the next sync creates it afresh.
IDLE_EXIT_S = 60.0


class JobCoordinator:
    """Holds one job's rank summaries and hang episode for its sidecars (an async actor)."""

    def __init__(self, job_id: str, stale_after_s: float = 30.0) -> None:
        self.job_id = job_id
        # A version means something only to the coordinator that gave it.
        self.state = CoordinatorState(stale_after_s=stale_after_s, instance=uuid.uuid4().hex)
        self.state.last_sync_at = time.monotonic()
        self._watching = False

    async def sync(
        self,
        sidecar_id: str,
        summaries: Sequence[RankSummary],
        note: EpisodeNote | None,
        detail: bool = True,
        since: tuple[str, int] | None = None,
        refresh: float = REPORTING_REFRESH_S,
        bounded: bool = False,
    ) -> SyncReply:
        """Store one sidecar's ranks and episode note; return the episode and the
        digest, or the others' ranks (changed ``since``) when it asks for ``detail``
        (``bounded``: for a large job, the job's verdict and the ranks it names)."""
        now = time.monotonic()
        return self.state.sync(sidecar_id, summaries, note, now, detail, since, refresh, bounded)

    async def info(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "episode": self.state.episode,
            "idle_s": round(time.monotonic() - self.state.last_sync_at, 3),
        }

    async def exit_when_idle(self, idle_s: float = IDLE_EXIT_S) -> bool:
        """Run until no sidecar synced for ``idle_s``, then end the actor (once per actor)."""
        if self._watching:
            return False
        self._watching = True
        while time.monotonic() - self.state.last_sync_at < idle_s:
            await asyncio.sleep(min(10.0, idle_s / 4))
        import ray

        ray.actor.exit_actor()
        return True  # pragma: no cover - exit_actor does not return


def coordinator(job_id: str, idle_exit_s: float = IDLE_EXIT_S) -> Any:
    """The handle of ``job_id``'s coordinator, created if it does not exist yet.

    Needs a connected Ray. Detached (it outlives the sidecar that created it)
    and named, so every sidecar of the job finds the same one.
    """
    import ray

    handle = (
        ray.remote(JobCoordinator)
        .options(
            name=job_coordinator_name(job_id),
            namespace=RAY_NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=8,
        )
        .remote(job_id)
    )
    handle.exit_when_idle.remote(idle_exit_s)  # type: ignore[union-attr]  # a no-op for a coordinator already watching
    return handle


def stop_coordinators() -> list[str]:
    """Kill every job coordinator (tests, tear-down); returns their names."""
    import ray
    from ray.util import list_named_actors

    stopped = []
    for entry in list_named_actors(all_namespaces=True):
        name = entry.get("name", "")
        if entry.get("namespace") != RAY_NAMESPACE or not is_job_actor_name(name):
            continue
        try:
            ray.kill(ray.get_actor(name, namespace=RAY_NAMESPACE), no_restart=True)
            stopped.append(name)
        except ValueError:
            continue  # went away meanwhile
    return stopped
