"""Timing DDP's gradient buckets with a communication hook.

DDP accepts exactly one comm hook per model (``register_comm_hook`` raises the
second time). So trainprobe's hook either *is* the allreduce, done exactly as
DDP does it without any hook, or wraps the one hook the user would have
registered. A model that already has a hook cannot be watched; watch_ddp says
so and changes nothing.

Exactness: without a hook, DDP's reducer multiplies each gradient by
``1 / world_size`` while copying it into the bucket, then all-reduces with SUM.
PyTorch's own ``allreduce_hook`` divides instead, which differs in the last bit
for world sizes that are not powers of two. The default hook here multiplies,
so gradients are bit-identical to DDP without a hook (tests/test_e2e_sync.py
checks it with three gloo ranks, tests/gpu with NCCL). The one case it does not
cover: ``gradient_as_bucket_view=True`` with gradients kept between steps
(``zero_grad(set_to_none=False)``), where DDP divides the bucket in place.
Under ``Join`` with uneven inputs DDP divides by the ranks still joined; this
hook, like PyTorch's, divides by the group size.

Hot path cost per bucket: a sequence number, a clock read, one small list, a
deque append and the same single ``.then`` callback the default hook has; on
CUDA also two event records (bench/probes/bench_sync.py, bench/HISTORY.md).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from trainprobe.hooks.watch import notices
from trainprobe.hooks.watch.cuda_events import EventPools
from trainprobe.hooks.watch.sync import END_NS, EVENTS, GroupLedger, Record, SyncLedger

log = logging.getLogger("trainprobe.hooks")

#: Marks the hooks trainprobe made, so a second watch_ddp is recognized.
_MARK = "__trainprobe_watch__"
CommHook = Callable[[Any, Any], Any]


def record_end(rec: Record | None) -> None:
    """Mark a collective finished; on CUDA, record its end event first.

    Called from the future's callback: on CUDA that runs right after the
    launch, with the current stream ordered after the collective, so the event
    completes when the collective does; on gloo it runs in gloo's thread once
    the collective is done.
    """
    if rec is None:
        return
    events = rec[EVENTS]
    if events is not None:
        try:
            events[2].record(events[1])
        except Exception:
            rec[EVENTS] = None  # judged by host time instead
    rec[END_NS] = time.monotonic_ns()


def default_allreduce_hook(
    ledger: GroupLedger, world_size: int, pools: EventPools | None, device: int | None
) -> CommHook:
    """DDP's own allreduce, timed. Register it with the process group as state.

    The CPU and CUDA variants are separate functions because every branch and
    call on this path shows in the per-bucket budget (bench/probes/bench_sync.py).
    """
    import torch.distributed as dist

    scale = 1.0 / world_size
    all_reduce = dist.all_reduce
    issue = ledger.issue
    mono = time.monotonic_ns

    # No annotations on the hooks on purpose: DDP inspects them, and a string
    # annotation (from __future__ import annotations) fails its check. DDP
    # also requires the second parameter to be named "bucket".
    def trainprobe_allreduce(state, bucket):  # type: ignore[no-untyped-def]
        buf = bucket.buffer()
        buf.mul_(scale)
        # issue() only counts, reads the clock and appends: it cannot fail.
        rec = issue("allreduce", buf.nbytes)

        def done(fut, rec=rec):  # type: ignore[no-untyped-def]
            rec[END_NS] = mono()
            try:
                return fut.value()[0]
            except Exception as err:  # a peer gone: say who killed it, if we did
                notices.explain(err)
                raise

        return all_reduce(buf, group=state, async_op=True).get_future().then(done)

    def trainprobe_allreduce_cuda(state, bucket):  # type: ignore[no-untyped-def]
        buf = bucket.buffer()
        buf.mul_(scale)
        try:
            events = pool.take()
            rec = issue("allreduce", buf.nbytes, events)
            pool.record(events[0])
        except Exception:
            rec = None

        def done(fut, rec=rec):  # type: ignore[no-untyped-def]
            record_end(rec)
            try:
                return fut.value()[0]
            except Exception as err:
                notices.explain(err)
                raise

        return all_reduce(buf, group=state, async_op=True).get_future().then(done)

    if pools is None or device is None:
        hook = trainprobe_allreduce
    else:
        pool = pools.for_device(device)
        hook = trainprobe_allreduce_cuda
    setattr(hook, _MARK, "allreduce")
    return hook


def wrap_comm_hook(ledger: GroupLedger, inner: CommHook, pools: EventPools | None) -> CommHook:
    """Time a user's comm hook: from its call to its future's completion.

    A hook that issues several collectives per bucket (PowerSGD issues two)
    counts as one numbered operation per bucket, named after the hook.
    """
    op = getattr(inner, "__name__", "") or getattr(
        getattr(inner, "func", None), "__name__", "comm_hook"
    )

    @functools.wraps(inner)
    def trainprobe_wrapped(state, bucket):  # type: ignore[no-untyped-def]
        try:
            buf = bucket.buffer()
            on_cuda = pools is not None and buf.is_cuda
            events = pools.for_device(buf.device.index).take() if pools and on_cuda else None
            rec = ledger.issue(op, buf.nbytes, events)
            if events is not None:
                events[2].record(events[0])
        except Exception:
            rec = None
        fut = inner(state, bucket)
        if rec is None:
            return fut

        def done(f, rec=rec):  # type: ignore[no-untyped-def]
            record_end(rec)
            try:
                return f.value()
            except Exception as err:
                notices.explain(err)
                raise

        return fut.then(done)

    # functools.wraps copies annotations too; DDP checks them, so keep none.
    trainprobe_wrapped.__annotations__ = {}
    setattr(trainprobe_wrapped, _MARK, op)
    return trainprobe_wrapped


def registered_hook(model: Any) -> tuple[str, bool]:
    """(name of the comm hook ``model`` already has or "", whether it is ours)."""
    for hook, _state in getattr(model, "_comm_hooks", None) or ():
        return getattr(hook, "__qualname__", repr(hook)), hasattr(hook, _MARK)
    try:
        # Built-in C++ hooks do not appear in _comm_hooks; DDP logs their name.
        name = model._get_ddp_logging_data().get("comm_hook") or ""
    except Exception:
        name = ""
    return str(name), False


def model_device(model: Any) -> int | None:
    """The CUDA device index of a DDP model, or None on CPU."""
    ids = getattr(model, "device_ids", None)
    if ids:
        dev = ids[0]
        return dev if isinstance(dev, int) else getattr(dev, "index", None)
    for p in model.parameters():
        return p.device.index if p.is_cuda else None
    return None


def watch_ddp(
    sync: SyncLedger,
    pools: EventPools,
    model: Any,
    comm_hook: CommHook | None,
    state: Any,
) -> bool:
    """Register a timed comm hook on ``model``; see LivenessProbeHook.watch_ddp."""
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        log.warning(
            "trainprobe: watch_ddp needs a DistributedDataParallel model, got %s; "
            "gradient sync is not measured",
            type(model).__name__,
        )
        return False
    existing, ours = registered_hook(model)
    if ours:
        return True
    if existing:
        log.warning(
            "trainprobe: this DDP model already has the comm hook %s, and DDP accepts only "
            "one, so gradient sync is not measured. Hand the hook to trainprobe instead of "
            "registering it: hook.watch_ddp(model, comm_hook=<your hook>, state=<its state>), "
            "or, where a framework registers it for you, give it "
            "hook.wrap_comm_hook(<your hook>, group=<its process group>).",
            existing,
        )
        return False
    pg = model.process_group
    device = model_device(model)
    cuda_pools = pools if device is not None else None
    if comm_hook is None:
        ledger = sync.group(pg)
        hook = default_allreduce_hook(ledger, pg.size(), cuda_pools, device)
        state = pg
    else:
        # The group the user's hook reduces over: its state, or the model's.
        group = state if isinstance(state, type(pg)) else getattr(state, "process_group", None)
        ledger = sync.group(group or pg)
        hook = wrap_comm_hook(ledger, comm_hook, cuda_pools)
    try:
        model.register_comm_hook(state, hook)
    except RuntimeError as err:
        # DDP appends to _comm_hooks before the reducer refuses; undo that.
        hooks = getattr(model, "_comm_hooks", None)
        if hooks and hooks[-1][0] is hook:
            hooks.pop()
        log.warning("trainprobe: could not register the DDP comm hook (%s); sync not measured", err)
        return False
    return True
