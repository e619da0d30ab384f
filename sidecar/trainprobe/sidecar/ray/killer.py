"""RayKiller: kill a worker's Ray actor by id, check it is gone, fall back to its pid.

What the action record of one rank holds after a kill through Ray:

- ``method: "ray.kill"``, ``actor_id``, ``no_restart`` (False for ``restart``);
- ``pid_gone``: the worker's pid no longer runs (True/False), or None when the
  pid is outside this sidecar's PID namespace. A process that is gone has
  released its GPU memory; one that ``ray.kill`` did not end is signalled
  (``escalated`` lists the signals);
- ``actor_state``, ``death_cause``, ``actor_pid``: what Ray's State API says
  afterwards (for example ``DEAD`` / ``RAY_KILL: ...``);
- ``signalled_first``: ``SIGKILL`` when the verified local worker was stopped
  (SIGSTOP, a tracer): such a process cannot answer the exit request that
  ``ray.kill`` sends it, and Ray's raylet SIGKILLs it only after its own
  timeout (5.3 s measured with Ray 2.60's defaults; ``kill_worker_timeout_milliseconds``,
  an internal raylet setting). Killed at once, its sockets close, so the
  replicas waiting for it in an allreduce go on; ``ray.kill`` follows for
  Ray's record (the actor ends as ``no_restart``);
- ``children``: the worker's descendants (a verified local pid only), found
  and stopped before ``ray.kill`` (act/tree.py). Ray ends a worker's direct
  children when it exits (``RAY_kill_child_processes_on_worker_exit``, on by
  default), not their children, nor any child of a worker it had to SIGKILL;
  what is still there once the worker is gone is ended here. A child listed
  with only ``SIGSTOP`` was ended by Ray.

When Ray cannot be used (not reachable in ``ray_timeout_s``, no handle was
registered for the actor, the call failed), the record is the fallback
killer's (signals), plus ``fallback: "signal"`` and ``ray_error``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainprobe.sidecar.act.killers import Killer
from trainprobe.sidecar.act.pidproc import Proc, open_proc
from trainprobe.sidecar.act.procs import pid_alive, proc_stopped, protected_pid, wait_gone
from trainprobe.sidecar.act.signals import terminate
from trainprobe.sidecar.act.tree import end_procs, stop_descendants, tree_records
from trainprobe.sidecar.core.ray.kill import (
    RayKillPlan,
    actor_summary,
    kill_settled,
    plan_ray_kill,
)
from trainprobe.sidecar.core.session.model import WorkerState
from trainprobe.sidecar.ray.link import RayLink

log = logging.getLogger("trainprobe.sidecar")


class RayKiller:
    """A :class:`~trainprobe.sidecar.act.actions.Killer` that goes through Ray."""

    def __init__(
        self, link: RayLink, fallback: Killer, timeout_s: float = 10.0, poll_s: float = 0.1
    ) -> None:
        self.link = link
        self.fallback = fallback
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="trainprobe-ray")

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(
            loop.run_in_executor(self._pool, fn, *args), self.timeout_s + 1.0
        )

    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        plan = plan_ray_kill(state.hello.ray, restart, ray_configured=True, verified=state.verified)
        if plan.route != "ray":
            routed = await self.fallback.kill(state, grace_s, restart)
            routed["route"] = plan.reason
            return routed
        t0 = time.monotonic()
        kids: dict[int, Proc] = {}
        first = ""
        try:
            if state.local and proc_stopped(state.hello.pid):
                # Before anything waits on Ray, which a stopped worker cannot answer.
                # Its tree first: a SIGKILLed worker's children are re-parented.
                kids = await self._tree(state)
                first = await self._sigkill_stopped(state)
            await self._call(self.link.wait_ready, self.timeout_s)
            if not first:
                kids = await self._tree(state)
            await self._call(self.link.kill, plan.actor_id, plan.no_restart)
        except Exception as err:
            ended: dict[str, object] = {}
            if first:  # the worker is gone: the fallback can no longer find its tree
                ended["signalled_first"] = first
                await end_procs(kids.values(), min(grace_s, 0.5))
                ended["children"], ended["skipped"] = tree_records(kids)
            _close(kids)  # otherwise the fallback's own kill finds (and ends) them again
            routed = await self._fall_back(state, grace_s, restart, plan, err)
            return {**routed, **ended}
        record: dict[str, object] = {
            "pid": state.hello.pid,
            "method": "ray.kill",
            "actor_id": plan.actor_id,
            "no_restart": plan.no_restart,
            "signals": [],
            "error": "",
        }
        if first:
            record["signalled_first"] = first
        try:
            record.update(await self._verify(state, plan, grace_s))
        finally:
            if kids:  # the worker was decided killed: never leave its descendants stopped
                # What Ray did not end: grandchildren, or any child of a SIGKILLed worker.
                await end_procs(kids.values(), min(grace_s, 0.5))
                record["children"], record["skipped"] = tree_records(kids)
            _close(kids)
        record["seconds"] = round(time.monotonic() - t0, 3)
        return record

    async def _tree(self, state: WorkerState) -> dict[int, Proc]:
        """The verified local worker's descendants, held and stopped. The worker
        itself keeps running: ``ray.kill`` needs it to exit through Ray."""
        if not state.local:
            return {}
        root = await asyncio.to_thread(open_proc, state.hello.pid, state.proc_start_ticks)
        if root is None:
            return {}
        try:
            return await asyncio.to_thread(stop_descendants, root, None, protected_pid, False)
        finally:
            root.close()

    async def _sigkill_stopped(self, state: WorkerState) -> str:
        """SIGKILL the verified local worker if it is (still) stopped; the signal's
        name if sent.

        Ray's exit request needs the worker to run: a stopped one leaves its
        peers (the replicas waiting for it in an allreduce) blocked until Ray's
        raylet gives up on it (about 5 s). Nor may it be resumed to exit by
        itself (SIGTERM and SIGCONT; the signal fallback, act/signals.terminate,
        SIGKILLs a held process first too): an evicted replica would finish, and
        commit, the step its peers discard.
        """
        pid = state.hello.pid
        if protected_pid(pid):
            return ""
        root = await asyncio.to_thread(open_proc, pid, state.proc_start_ticks)
        if root is None:  # gone, or the pid is another process's by now
            return ""
        try:
            if not proc_stopped(pid):
                return ""
            return signal.SIGKILL.name if root.signal(signal.SIGKILL) else ""
        finally:
            root.close()

    async def _fall_back(
        self,
        state: WorkerState,
        grace_s: float,
        restart: bool,
        plan: RayKillPlan,
        err: BaseException,
    ) -> dict[str, object]:
        reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        log.warning(
            "cannot kill actor %s of %s through Ray (%s); signalling pid %d instead",
            plan.actor_id,
            state.key,
            reason,
            state.hello.pid,
        )
        record = await self.fallback.kill(state, grace_s, restart)
        record.update(fallback="signal", ray_error=reason, actor_id=plan.actor_id)
        return record

    async def _verify(
        self, state: WorkerState, plan: RayKillPlan, grace_s: float
    ) -> dict[str, object]:
        pid = state.hello.pid
        out: dict[str, object] = {}
        if state.local:
            gone = await wait_gone(pid, grace_s + self.timeout_s)
            if not gone:
                # ray.kill returned but the process lives on (a zombie worker
                # keeps its GPU memory): end it ourselves.
                outcome = await terminate(pid, 0.0, state.proc_start_ticks)
                out["escalated"] = outcome.signals
                gone = not pid_alive(pid)
            out["pid_gone"] = gone
        else:
            out["pid_gone"] = None  # not in our PID namespace: Ray's word is all we have
        summary = await self._settled_summary(plan.actor_id, pid)
        out.update(summary)
        out["exited"] = bool(out["pid_gone"]) if state.local else kill_settled(summary, pid)
        if not out["exited"]:
            out["error"] = f"pid {pid} still runs after ray.kill and SIGKILL"
        return out

    async def _settled_summary(self, actor_id: str, old_pid: int) -> dict[str, object]:
        """Poll the State API until the kill shows (or ``timeout_s`` passes)."""
        deadline = time.monotonic() + self.timeout_s
        summary: dict[str, object] = actor_summary(None)
        while True:
            try:
                summary = actor_summary(await self._call(self.link.actor_state, actor_id))
            except Exception as err:
                summary = {**actor_summary(None), "state_error": f"{type(err).__name__}: {err}"}
            if kill_settled(summary, old_pid) or time.monotonic() >= deadline:
                return summary
            await asyncio.sleep(self.poll_s)

    def start(self) -> None:
        """Start connecting to Ray in the background (a stand-alone sidecar)."""
        self.link.start()

    def close(self) -> None:
        """Disconnect from Ray (if the link connected it) and stop the threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        try:
            self.link.close()
        except Exception:
            log.debug("closing the Ray link failed", exc_info=True)


def _close(procs: dict[int, Proc]) -> None:
    for p in procs.values():
        p.close()
