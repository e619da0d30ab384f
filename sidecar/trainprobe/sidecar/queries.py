"""The sidecar's answers to its clients: Status and Diagnose.

Both read what the registry and the engine already hold; neither changes
anything. They are apart from the composition root (``server.py``) because
they are what an operator sees, with their own bounds: a Status reply stops
adding rows at :data:`~trainprobe.sidecar.core.limits.MAX_STATUS_BYTES` (the
rest are counted, not built), and a Diagnose reply's text and JSON each stay
within :data:`~trainprobe.sidecar.core.limits.MAX_DIAGNOSE_CHARS`. A job's name
stands for its id wherever an id is asked for (``core/jobnames.py``).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

from trainprobe.proto import VERSION, probe_pb2
from trainprobe.sidecar.core.jobnames import job_label, names_of, resolve_job
from trainprobe.sidecar.core.limits import MAX_DIAGNOSE_CHARS, MAX_STATUS_BYTES
from trainprobe.sidecar.core.session.overload import Shedder
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.engine.loop import Engine
from trainprobe.sidecar.transport.pb import status_pb

__all__ = ["Queries", "bounded_diagnosis"]


def bounded_diagnosis(job_id: str, text: str, as_json: str) -> probe_pb2.DiagnoseReply:
    """A Diagnose reply within :data:`MAX_DIAGNOSE_CHARS` for its text and its JSON.

    Text is cut with a note; JSON too long is replaced by a short object that
    says so, since a cut document would not parse.
    """
    cut = 0
    if len(text) > MAX_DIAGNOSE_CHARS:
        cut += len(text) - MAX_DIAGNOSE_CHARS
        text = (
            text[:MAX_DIAGNOSE_CHARS] + f"\n... ({len(text) - MAX_DIAGNOSE_CHARS} characters cut)"
        )
    if len(as_json) > MAX_DIAGNOSE_CHARS:
        cut += len(as_json)
        as_json = json.dumps(
            {
                "job_id": job_id,
                "truncated": True,
                "error": f"the analysis is {len(as_json)} characters of JSON, over the "
                f"{MAX_DIAGNOSE_CHARS} a reply carries; see the incident log",
            }
        )
    return probe_pb2.DiagnoseReply(job_id=job_id, text=text, json=as_json, truncated_chars=cut)


class Queries:
    """Status and Diagnose over one sidecar's registry and engine.

    ``ray_responder`` returns the Ray watcher's responder, or None while the
    sidecar runs none (it is started with the servers, after this is built).
    ``job_sync`` and ``job_sync_hub`` return summary mode's status (this
    node's stream to its upstream; the coordinators hosted here), or None
    where there is none to show.
    """

    def __init__(
        self,
        registry: Registry,
        engine: Engine,
        shedder: Shedder,
        clock: Callable[[], float],
        ray_responder: Callable[[], Any],
        job_sync: Callable[[], probe_pb2.JobSyncLinkStatus | None] = lambda: None,
        job_sync_hub: Callable[[], probe_pb2.JobSyncHubStatus | None] = lambda: None,
    ) -> None:
        self.registry = registry
        self.engine = engine
        self.shedder = shedder
        self.clock = clock
        self.ray_responder = ray_responder
        self.job_sync = job_sync
        self.job_sync_hub = job_sync_hub

    def status(self, job_id: str = "") -> probe_pb2.StatusReply:
        now = self.clock()
        thresholds: dict[str, float] = {}
        rows = []
        size = omitted = 0
        # A name stands for its job (one id; AmbiguousJob, a LookupError, for several).
        job_id = resolve_job(job_id, self.job_names()) if job_id else ""
        for w in sorted(self.registry, key=lambda w: (w.hello.job_id, w.hello.rank)):
            if job_id and job_id != w.hello.job_id:
                continue
            if size > MAX_STATUS_BYTES:
                omitted += 1  # counted, not built: a huge registry costs no rows
                continue
            job = w.hello.job_id
            if job not in thresholds:
                thresholds[job] = self.engine.stall_threshold_s(job)
            ep = self.engine.episode(job)
            suspect = ep.suspect if ep is not None and not ep.acted else ""
            row = status_pb(w, now, thresholds[job], suspect)
            size += row.ByteSize()
            if size > MAX_STATUS_BYTES:
                omitted += 1
                continue
            rows.append(row)
        reply = probe_pb2.StatusReply(
            workers=rows,
            sidecar_version=VERSION,
            node=socket.gethostname(),
            omitted=omitted,
        )
        load = self.shedder.load(now)
        reply.ingest.CopyFrom(
            probe_pb2.IngestStatus(
                overloaded=load.overloaded,
                applied=load.applied,
                shed=load.shed,
                max_lag_s=load.max_lag_s,
                shed_per_s=load.shed_per_s,
                behind=load.behind,
                own_lag_s=load.own_lag_s,
                deferred_now=load.deferred_now,
                deferred=load.deferred,
            )
        )
        responder = self.ray_responder()
        if responder is not None:
            reply.ray_watch.CopyFrom(responder.status())
        if (link := self.job_sync()) is not None:
            reply.job_sync.CopyFrom(link)
        if (hub := self.job_sync_hub()) is not None:
            reply.job_sync_hub.CopyFrom(hub)
        return reply

    def job_names(self) -> dict[str, str]:
        """id -> name of every job with a session here ('' where unnamed): its
        verified sessions' name first, so that a client without a ticket in the
        job cannot rename it (and free its name for a job of its own)."""
        sessions = sorted(self.registry, key=lambda w: not w.verified)  # stable
        return names_of((w.hello.job_id, w.hello.job_name) for w in sessions)

    async def diagnose_ray(self, dot: bool) -> probe_pb2.DiagnoseReply:
        """``diagnose --ray``: the Ray watcher's last wait graph (rendered off the loop)."""
        responder = self.ray_responder()
        if responder is None:
            raise RuntimeError(
                "this sidecar runs no Ray watcher (it runs with --ray-address and ray_watch on)"
            )
        return await asyncio.to_thread(responder.diagnose, dot)

    async def diagnose(self, job_id: str) -> probe_pb2.DiagnoseReply:
        """The current culprit analysis of a job (LookupError if none of it reported here).

        Without a job id, the only job this sidecar serves. A job's name
        (``job_name``) stands for its id when one job has it.
        """
        names = self.job_names()
        if not job_id:
            if not names:
                raise LookupError("no worker has reported to this sidecar yet")
            # A finished job (no rank connected, no open episode) is not counted:
            # it stays in status as finished, and --job still reaches it.
            live = sorted(
                {w.hello.job_id for w in self.registry if w.connected}
                | {j for j in names if self.engine.episode(j) is not None}
            )
            jobs = live or sorted(names)
            if len(jobs) > 1:
                shown = ", ".join(job_label(j, names.get(j, "")) for j in jobs[:5])
                more = ", ..." if len(jobs) > 5 else ""
                running = "running " if live else ""
                raise LookupError(
                    f"this sidecar serves {len(jobs)} {running}jobs ({shown}{more}): pass --job"
                )
            job_id = jobs[0]
        else:
            job_id = resolve_job(job_id, names)
        diag, episode = self.engine.diagnose(job_id)
        record = {"job_id": job_id, **diag.to_record(), "episode": episode.id if episode else None}
        return bounded_diagnosis(job_id, diag.text, json.dumps(record, default=str))
