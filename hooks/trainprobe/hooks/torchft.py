"""torchft: which replica this process trains in, and a comm hook whose error path works.

A replicated job (torchft: replica groups training in lockstep, a step
committed only by the replicas in the current quorum) can lose one replica
and go on. torchft drops a replica only once its Manager stops heartbeating,
and heartbeats come from the Manager's own thread: a replica whose training
thread hangs still looks alive, and the others wait for it in the quorum or
in the gradient allreduce. trainprobe sees the hang; to act on the replica
rather than the job, the sidecar must know which replica each process is in,
and which replicas only wait. :meth:`LivenessProbeHook.watch_torchft` does
that: it reads the replica's identity from the Manager, marks where the
training thread waits inside torchft (its quorum, the replicated allreduce,
its commit), and adds both to Hello and every report.

The comm hook: torchft 0.2.0's ``DistributedDataParallel._comm_hook`` returns
``work.get_future()._fut``. On its error path (the Manager already errored this
step, e.g. after a peer failed or was evicted, so ``Manager.allreduce`` returns
a ``_DummyWork``) that future is a plain ``torch.futures.Future`` and the hook
raises ``AttributeError: 'Future' object has no attribute '_fut'``, which
fails the backward pass and leaves DDP's reducer broken for every later step:
the survivor of a lost replica dies too. :class:`DistributedDataParallel` here
is torchft's wrapper with :func:`ft_comm_hook` instead: the same allreduce on
the healthy path, and on the error path a completed future holding the bucket,
so the step runs to ``should_commit()``, which returns False (the Manager
errored) and discards it. No torchft release has the fix (0.2.0 is the
newest), so we carry it here; ``tests/test_torchft.py`` reproduces the failure
with torchft's own wrapper and checks ours.

Cost on the training thread: a tuple store on entering and leaving each
wrapped Manager call, and per bucket one ledger record (as ``watch_ddp``).
Everything torchft says is read in the reporter thread from plain attributes
of the Manager; nothing here blocks or raises into training.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
import time
from typing import Any

from trainprobe.hooks.report.replica_group import RayReplicaGroup, ray_train_replica_group
from trainprobe.hooks.watch import notices
from trainprobe.hooks.watch.sync import END_NS, GroupLedger
from trainprobe.proto import probe_pb2

log = logging.getLogger("trainprobe.hooks")

__all__ = [
    "ALLREDUCE",
    "COMMIT",
    "GROUP",
    "QUORUM",
    "DistributedDataParallel",
    "RayReplicaGroup",
    "ReplicaWatch",
    "ft_comm_hook",
    "ray_train_replica_group",
    "replica_rank",
]

#: What the training thread can wait for inside torchft.
QUORUM, ALLREDUCE, COMMIT = "quorum", "allreduce", "commit"
#: The collective group torchft's replicated allreduce is counted in.
GROUP = "torchft"
#: Where a Manager keeps its watch (the comm hook finds it there).
WATCH_ATTR = "_trainprobe_replica_watch"
#: Manager methods the training thread blocks in, and what it waits for there.
_WAITS = (("wait_quorum", QUORUM), ("should_commit", COMMIT))
_IDLE: tuple[str, int] = ("", 0)
_MAX_ID = 128


def _base_replica_id(manager: Any) -> str:
    """The replica id the script gave (stable across a replacement), else torchft's."""
    rid = getattr(manager, "_replica_id", None)
    if not rid:
        logger = getattr(manager, "_logger", None)
        rid = str(getattr(logger, "_replica_id", "") or "")
    return str(rid).split(":", 1)[0][:_MAX_ID]


def replica_rank(replica_id: str, group_rank: int, group_world_size: int) -> int | None:
    """The job-wide rank torchft itself gives this process (replica index from the
    id's trailing digits, as torchft's Manager computes it), or None without digits."""
    m = re.search(r"(\d+)$", replica_id)
    if m is None:
        return None
    return int(m.group(1)) * max(1, group_world_size) + group_rank


class ReplicaWatch:
    """One torchft Manager, seen from this process's hook."""

    __slots__ = ("_manager", "group_rank", "group_world_size", "ledger", "replica_id", "state")

    def __init__(self, manager: Any, ledger: GroupLedger | None) -> None:
        self._manager = manager
        self.replica_id = _base_replica_id(manager)
        self.group_rank = int(getattr(manager, "_group_rank", 0) or 0)
        self.group_world_size = int(getattr(manager, "_group_world_size", 1) or 1)
        self.ledger = ledger
        #: (what, since monotonic ns): one tuple, so the reporter reads both at once.
        self.state: tuple[str, int] = _IDLE

    # -- training thread ---------------------------------------------------------

    def enter(self, what: str) -> tuple[str, int]:
        prev = self.state
        if not prev[0]:
            self.state = (what, time.monotonic_ns())
        return prev

    def leave(self, prev: tuple[str, int]) -> None:
        self.state = prev

    # -- reporter thread ---------------------------------------------------------

    def identity_pb(self) -> probe_pb2.ReplicaIdentity:
        return probe_pb2.ReplicaIdentity(
            replica_id=self.replica_id,
            group_rank=self.group_rank,
            group_world_size=self.group_world_size,
        )

    def collect(self, report: probe_pb2.Report) -> None:
        """A collector: this replica's quorum, step and wait, into ``report``."""
        m = self._manager
        what, since = self.state
        r = report.replica
        r.quorum_id = int(getattr(m, "_quorum_id", -1))
        r.step = int(getattr(m, "_step", 0))
        r.participants = int(getattr(m, "_participating_replica_world_size", 0) or 0)
        r.waiting = what
        r.waiting_since_mono_ns = since
        r.errored = getattr(m, "_errored", None) is not None

    def report_error(self, text: str) -> bool:
        """Tell the Manager this step is bad (it then does not commit it) and, if the
        training thread waits in the replicated allreduce, abort that allreduce's
        process group: in a ring of 3 or more replicas a survivor may wait on peers
        of the evicted one, not on it, and gloo lets it go only when those peers drop
        their group, at a quorum that waits the lighthouse's join timeout for it.
        Aborted on every survivor, the group closes once the evicted replica dies;
        the next quorum, without it, makes a new one."""
        try:
            self._manager.report_error(RuntimeError(text))
        except Exception:
            log.debug("trainprobe: Manager.report_error failed", exc_info=True)
            return False
        if self.state[0] == ALLREDUCE:
            pg = getattr(self._manager, "_pg", None)
            # torchft's abort drops its group, and the last reference's destructor
            # waits for the allreduce in flight, which ends only once the evicted
            # replica is killed: after this notice is answered. Kept here, dropped
            # by a thread of its own, so that the answer (and the kill) need not wait.
            held = [getattr(pg, "_pg", None)]
            try:
                pg.abort()  # type: ignore[union-attr]
            except Exception:
                log.debug("trainprobe: aborting the replicated group failed", exc_info=True)
            threading.Thread(
                target=held.clear, name="trainprobe-group-release", daemon=True
            ).start()
        return True


def install(manager: Any, ledger: GroupLedger | None) -> ReplicaWatch:
    """Attach a :class:`ReplicaWatch` to ``manager`` (once) and mark its waits."""
    watch = getattr(manager, WATCH_ATTR, None)
    if isinstance(watch, ReplicaWatch):
        return watch
    watch = ReplicaWatch(manager, ledger)
    for name, what in _WAITS:
        inner = getattr(manager, name, None)
        if inner is None:
            continue
        setattr(manager, name, _marked(inner, watch, what))
    setattr(manager, WATCH_ATTR, watch)
    return watch


def _marked(inner: Any, watch: ReplicaWatch, what: str) -> Any:
    @functools.wraps(inner)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        prev = watch.enter(what)
        try:
            return inner(*args, **kwargs)
        finally:
            watch.leave(prev)

    return wrapped


def ft_comm_hook(state, bucket):  # type: ignore[no-untyped-def]
    """torchft's DDP comm hook, with an error path that returns a future.

    No annotations: DDP inspects them (see ddp.py). ``state`` is the Manager.
    """
    import torch

    buf = bucket.buffer()
    watch = getattr(state, WATCH_ATTR, None)
    rec = None
    prev = _IDLE
    if watch is not None:
        prev = watch.enter(ALLREDUCE)
        if watch.ledger is not None:
            rec = watch.ledger.issue(ALLREDUCE, buf.nbytes)
    fut = None
    try:
        work = state.allreduce(buf)
        work.wait()
        fut = work.get_future()
    except Exception as err:  # torchft swallows most; whatever is left discards the step
        notices.explain(err)
        with contextlib.suppress(Exception):
            state.report_error(err)
    finally:
        if rec is not None:
            rec[END_NS] = time.monotonic_ns()
        if watch is not None:
            watch.leave(prev)
    inner = getattr(fut, "_fut", None)
    if inner is not None:
        # torchft's _ManagedFuture: the real future must go back to DDP, or it hangs.
        return inner
    if isinstance(fut, torch.futures.Future) and not hasattr(fut, "_managed_work"):
        return fut  # a _DummyWork's future: already completed with the bucket
    # A managed wait that failed before its chain was built: the Manager
    # errored, should_commit() discards the step; DDP needs a done future.
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(buf)
    return done


_DDP_CLASS: list[type] = []


def _ddp_class() -> type:
    # torchft is imported only when its wrapper is built (trainprobe[torchft]).
    if not _DDP_CLASS:
        from torchft.ddp import DistributedDataParallel as FtDDP  # type: ignore[import-untyped]

        class TrainprobeFtDDP(FtDDP):
            """torchft's DDP wrapper with :func:`ft_comm_hook` (see the module's doc)."""

            _comm_hook = staticmethod(ft_comm_hook)

        _DDP_CLASS.append(TrainprobeFtDDP)
    return _DDP_CLASS[0]


def DistributedDataParallel(manager: Any, module: Any, **kwargs: Any) -> Any:
    """``torchft.DistributedDataParallel(manager, module, **kwargs)`` with
    :func:`ft_comm_hook`: a drop-in for torchft's wrapper (a subclass of it)."""
    return _ddp_class()(manager, module, **kwargs)
