"""Python stacks of every thread, captured from the reporter thread."""

from __future__ import annotations

import sys
import threading
import traceback


def format_all_stacks(skip_thread_ids: frozenset[int] = frozenset()) -> str:
    """Every thread's stack, main thread first, innermost frame last."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main_id = threading.main_thread().ident
    frames = sys._current_frames()
    order = sorted(frames, key=lambda tid: (tid != main_id, names.get(tid, ""), tid))
    parts = []
    for tid in order:
        if tid in skip_thread_ids:
            continue
        name = names.get(tid, "?")
        parts.append(f'Thread {tid:#x} "{name}" (most recent call last):\n')
        parts.extend(traceback.format_stack(frames[tid]))
    return "".join(parts)
