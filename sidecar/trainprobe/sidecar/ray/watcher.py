"""The Ray watcher: snapshots of placement groups, tasks and actors, judged by the pure core.

One per cluster is enough. Every call here blocks on Ray (the GCS, the
dashboard's State API, py-spy): :meth:`RayWatcher.run` runs them on its own
single thread, so an asyncio loop that awaits it is never blocked.

What one snapshot costs (Ray 2.60): ``ray.nodes()``, ``list_placement_groups``
(detail), ``list_actors`` and ``list_tasks`` of unfinished tasks only (no
detail: the detail columns carry every task's events), the wait records the
``trainprobe.hooks.ray_wait`` wrapper left in the internal KV, and, only when
a group is pending, ``placement_group_table()`` for its strategy and the
actors scheduled into it. ``list_objects`` is not called: it asks every
worker of the cluster for its references, and the ObjectID itself names its
producer. Lists pass ``limit`` (default 10,000, not the API's 100); one that
comes back full is named in ``RaySnapshot.truncated``.

Consumer edges come from the wrapper's records (objects known) and from
``py-spy dump`` of local processes whose RUNNING task has unfinished
children (Ray 2.60 reports no RUNNING_IN_RAY_GET state): at most
``max_dumps`` dumps per snapshot, a positive answer kept for ``dump_ttl_s``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import logging
import resource
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from trainprobe.sidecar.act.stacks import find_py_spy
from trainprobe.sidecar.core.judge.stackframes import parse_stacks
from trainprobe.sidecar.core.ray.placement import PlacementHistory, PlacementLimits, judge_placement
from trainprobe.sidecar.core.ray.snapshot import (
    NodeInfo,
    RayFinding,
    RaySnapshot,
    TaskInfo,
    WaitRecord,
    ray_get_site,
)
from trainprobe.sidecar.core.ray.wait import (
    RUNNING_STATES,
    CycleJudge,
    WaitGraph,
    build_graph,
    render_dot,
    render_text,
)
from trainprobe.sidecar.ray.rows import (
    actor_info,
    node_info,
    pg_info,
    task_info,
    wait_record,
    with_strategy,
)

log = logging.getLogger("trainprobe.sidecar")

KV_NAMESPACE = "trainprobe"  # the same as trainprobe.hooks.ray_wait's
KV_PREFIX = b"wait:"
#: A wait record whose task is not listed as unfinished this long after it was written is stale.
STALE_WAIT_S = 60.0


class RayWatcher:
    """Snapshots Ray and judges rules ``placement_group`` and ``wait_cycle``."""

    def __init__(
        self,
        address: str | None = None,
        pending_limit_s: float = 60.0,
        list_limit: int = 10_000,
        timeout_s: int = 10,
        py_spy: str = "auto",
        max_dumps: int = 16,
        dump_ttl_s: float = 30.0,
    ) -> None:
        #: The GCS address for the State API; None: the one of the connected Ray.
        self.address = address
        self.limits = PlacementLimits(pending_limit_s)
        self.list_limit = list_limit
        self.timeout_s = timeout_s
        self.py_spy = find_py_spy(py_spy)
        self.max_dumps = max_dumps
        self.dump_ttl_s = dump_ttl_s
        self.pg_history = PlacementHistory()
        self.cycles = CycleJudge()
        self.last: RaySnapshot | None = None
        self.graph: WaitGraph | None = None
        self.findings: collections.deque[RayFinding] = collections.deque(maxlen=100)
        #: CPU seconds of the thread that ran snapshots, plus py-spy's; and how many.
        self.cpu_s = 0.0
        self.snapshots = 0
        self._dumps: dict[str, tuple[float, str]] = {}  # task id -> (when, call site)
        self._local_ips: set[str] = set()

    # -- snapshot -------------------------------------------------------------------

    def _gcs(self) -> str | None:
        import ray

        return self.address or (
            ray.get_runtime_context().gcs_address if ray.is_initialized() else None
        )

    def snapshot(self) -> RaySnapshot:
        """One consistent-enough picture of the cluster (blocking; several Ray calls)."""
        import ray
        from ray.util.state import list_actors, list_placement_groups, list_tasks

        addr, lim, tmo = self._gcs(), self.list_limit, self.timeout_s
        kw: dict[str, Any] = dict(
            address=addr, limit=lim, timeout=tmo, raise_on_missing_output=False
        )
        truncated: list[str] = []
        errors: list[str] = []
        taken_at = time.time()
        nodes = tuple(node_info(n) for n in ray.nodes())
        raw_pgs = list_placement_groups(detail=True, **kw)
        raw_actors = list_actors(filters=[("state", "!=", "DEAD")], **kw)
        raw_tasks = list_tasks(
            filters=[("state", "!=", "FINISHED"), ("state", "!=", "FAILED")], **kw
        )
        for name, got in (
            ("placement_groups", raw_pgs),
            ("actors", raw_actors),
            ("tasks", raw_tasks),
        ):
            if len(got) >= lim:
                truncated.append(name)
        pgs = tuple(pg_info(p) for p in raw_pgs)
        actors = [actor_info(a) for a in raw_actors]
        pending = [p for p in pgs if p.state in ("PENDING", "RESCHEDULING")]
        if pending:
            table = ray.util.placement_group_table()
            pgs = tuple(
                with_strategy(p, table.get(p.pg_id, {}).get("strategy", "PACK")) for p in pgs
            )
            for p in pending:  # actors scheduled into it (a detail column): few, only now
                for a in list_actors(
                    filters=[("placement_group_id", "=", p.pg_id)], detail=True, **kw
                ):
                    actors.append(actor_info(a))
        tasks = tuple(task_info(t) for t in raw_tasks)
        waits = self._wrapper_waits(tasks, taken_at, errors) + self._stack_waits(
            tasks, nodes, errors
        )
        snap = RaySnapshot(
            taken_at, nodes, pgs, tasks, tuple(actors), waits, tuple(truncated), tuple(errors)
        )
        self.last = snap
        return snap

    def _wrapper_waits(
        self, tasks: tuple[TaskInfo, ...], now: float, errors: list[str]
    ) -> tuple[WaitRecord, ...]:
        from ray.experimental import internal_kv

        live = {t.task_id for t in tasks}
        out = []
        try:
            keys = internal_kv._internal_kv_list(KV_PREFIX, namespace=KV_NAMESPACE)[
                : self.list_limit
            ]
            for key in keys:
                raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
                if raw is None:
                    continue
                rec = json.loads(raw)
                if rec["task_id"] not in live and now - float(rec.get("since", 0)) > STALE_WAIT_S:
                    internal_kv._internal_kv_del(
                        key, namespace=KV_NAMESPACE
                    )  # its process died mid-wait
                    continue
                out.append(wait_record(rec))
        except Exception as err:
            errors.append(f"wait records: {type(err).__name__}: {err}")
        return tuple(out)

    def _stack_waits(
        self, tasks: tuple[TaskInfo, ...], nodes: tuple[NodeInfo, ...], errors: list[str]
    ) -> tuple[WaitRecord, ...]:
        if not self.py_spy:
            return ()
        if not self._local_ips:
            with contextlib.suppress(Exception):
                import ray

                self._local_ips = {
                    ray.util.get_node_ip_address(),
                    socket.gethostbyname(socket.gethostname()),
                }
        local = {n.node_id for n in nodes if n.address in self._local_ips}
        parents = {t.parent_task_id for t in tasks}
        now = time.monotonic()
        self._dumps = {k: v for k, v in self._dumps.items() if now - v[0] < self.dump_ttl_s}
        out, dumped = [], 0
        for t in tasks:
            if t.state not in RUNNING_STATES or not t.pid or t.task_id not in parents:
                continue
            if t.node_id and t.node_id not in local:
                continue  # py-spy reads only this host's processes; the wrapper covers the rest
            cached = self._dumps.get(t.task_id)
            if cached is None or not cached[1]:
                if dumped >= self.max_dumps:
                    continue
                dumped += 1
                cached = (now, self._dump_site(t.pid, errors))
                self._dumps[t.task_id] = cached
            if cached[1]:
                out.append(WaitRecord(t.task_id, cached[1], "stack", pid=t.pid))
        return tuple(out)

    def _dump_site(self, pid: int, errors: list[str]) -> str:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(
                [self.py_spy, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=5,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            errors.append(f"py-spy {pid}: {err}")
            return ""
        finally:
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            self.cpu_s += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            errors.append(f"py-spy {pid}: {done.stderr.strip()[-200:]}")
            return ""
        return ray_get_site(parse_stacks(done.stdout))

    # -- judging ---------------------------------------------------------------------

    def judge(self, now: float | None = None) -> list[RayFinding]:
        """Snapshot and judge (blocking). ``now``: Unix seconds, default the snapshot's time."""
        cpu0 = time.thread_time()
        try:
            snap = self.snapshot()
            at = snap.taken_at if now is None else now
            found = judge_placement(snap, self.pg_history, at, self.limits) + self.cycles.judge(
                snap, at
            )
            self.graph = build_graph(snap)
        finally:
            self.cpu_s += time.thread_time() - cpu0
            self.snapshots += 1
        self.findings.extend(found)
        return found

    def diagnose(self) -> str:
        """The current wait graph as text, then as DOT (``trainprobe diagnose --ray``)."""
        graph = self.graph or build_graph(self.snapshot())
        return render_text(graph) + "\n\n" + render_dot(graph)

    def status(self) -> dict[str, object]:
        return {
            "snapshots": self.snapshots,
            "findings": [f.to_record() for f in self.findings],
            "truncated": list(self.last.truncated) if self.last else [],
            "errors": list(self.last.errors) if self.last else [],
        }

    async def run(
        self,
        stop: asyncio.Event | threading.Event,
        on_finding: Callable[[RayFinding], object],
        interval_s: float = 2.0,
    ) -> None:
        """Judge every ``interval_s`` until ``stop`` is set; Ray calls run on one own thread."""
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="trainprobe-ray-watch")
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    for finding in await loop.run_in_executor(pool, self.judge):
                        on_finding(finding)
                except Exception as err:  # Ray busy or gone: try again next round
                    log.warning("ray watcher: snapshot failed: %s: %s", type(err).__name__, err)
                left = max(0.0, interval_s - (time.monotonic() - started))
                if isinstance(stop, asyncio.Event):
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), left)
                else:
                    await asyncio.sleep(left)
        finally:
            pool.shutdown(wait=False)
