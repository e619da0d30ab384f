"""``ray.get`` that tells trainprobe's Ray watcher what it waits on (opt-in).

Ray's State API does not say which objects a blocked task waits on, so a
wait cycle between actors cannot be seen from it. Use this in place of
``ray.get`` where a wait may be long::

    from trainprobe.hooks import ray_wait

    value = ray_wait.get(other_actor.method.remote())      # like ray.get
    with ray_wait.waiting([ref_a, ref_b]):                  # around any blocking call
        ready, _ = ray.wait([ref_a, ref_b], num_returns=2)

A wait that ends within ``record_after_s`` (0.5 s) costs one ``ray.wait``
and writes nothing. A longer one writes one small record (task id, pid, call
site, object ids) into Ray's internal KV (GCS), under ``wait:<task id>`` in
namespace ``trainprobe``, and deletes it when the wait ends: one key per
blocked task at most, so the store stays bounded. The watcher reads those
keys each snapshot and removes the ones whose task is long gone (a process
killed mid-wait). Any failure to record is swallowed: the user's ``get``
never fails because of trainprobe.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

log = logging.getLogger("trainprobe.hooks")

KV_NAMESPACE = "trainprobe"
KV_PREFIX = b"wait:"
RECORD_AFTER_S = 0.5


def caller_site(depth: int = 2) -> str:
    """``file.py:17 in Class.method`` of the frame ``depth`` levels up."""
    frame = sys._getframe(depth)
    code = frame.f_code
    name = getattr(code, "co_qualname", code.co_name)
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {name}"


def _refs(refs: Any) -> list[Any]:
    import ray

    return [refs] if isinstance(refs, ray.ObjectRef) else list(refs)


@contextlib.contextmanager
def waiting(refs: Any, call_site: str = "") -> Iterator[None]:
    """Record "this task waits on ``refs``" for the Ray watcher while the block runs."""
    key = b""
    try:
        import ray
        from ray.experimental import internal_kv

        task_id = ray.get_runtime_context().get_task_id() or ""
        if task_id:
            key = KV_PREFIX + task_id.encode()
            record = {
                "task_id": task_id,
                "pid": os.getpid(),
                "call_site": call_site or caller_site(3),
                "objects": [r.hex() for r in _refs(refs)][:64],
                "since": time.time(),
            }
            internal_kv._internal_kv_put(
                key, json.dumps(record), overwrite=True, namespace=KV_NAMESPACE
            )
    except Exception as err:  # never the user's problem
        log.debug("ray_wait: cannot record a wait: %s", err)
        key = b""
    try:
        yield
    finally:
        if key:
            with contextlib.suppress(Exception):
                from ray.experimental import internal_kv

                internal_kv._internal_kv_del(key, namespace=KV_NAMESPACE)


def get(refs: Any, *, timeout: float | None = None, record_after_s: float = RECORD_AFTER_S) -> Any:
    """``ray.get(refs, timeout=timeout)``, recorded for the watcher if it lasts."""
    import ray

    site = caller_site(2)
    start = time.monotonic()
    unique: Sequence[Any] = list({r.hex(): r for r in _refs(refs)}.values())
    if unique and record_after_s > 0:
        first = record_after_s if timeout is None else min(record_after_s, timeout)
        ready, _ = ray.wait(list(unique), num_returns=len(unique), timeout=first)
        if len(ready) == len(unique):
            return ray.get(refs, timeout=timeout)
    left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
    with waiting(refs, call_site=site):
        return ray.get(refs, timeout=left)
