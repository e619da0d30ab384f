"""Reading where a rank is stuck out of the three stack formats the sidecar receives."""

from __future__ import annotations

import faulthandler
import tempfile
import threading

from trainprobe.hooks.watch.stacks import format_all_stacks
from trainprobe.sidecar.core.judge.stackframes import parse_stacks, stuck_at

PY_SPY = """\
Process 5696: /venv/bin/python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 5696 (idle): "MainThread"
    all_reduce (/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2806)
    wrapper (/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:81)
    step (/job/train.py:88)
    <module> (/job/train.py:120)
Thread 5709 (active): "trainprobe-reporter"
    select (/usr/lib/python3.11/selectors.py:468)
"""


def load_batch(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait(10)


def test_py_spy_dump_names_the_user_frame_and_the_innermost() -> None:
    threads = parse_stacks(PY_SPY)
    assert [t.name for t in threads] == ["MainThread", "trainprobe-reporter"]
    assert threads[0].state == "idle" and threads[0].frames[0].function == "all_reduce"
    assert stuck_at(PY_SPY) == (
        "train.py:88 in step (innermost: distributed_c10d.py:2806 in all_reduce)"
    )


def test_the_hooks_own_answer_is_read_innermost_first() -> None:
    """A real dump of this process: a thread blocked in load_batch (user code here)."""
    ready, release = threading.Event(), threading.Event()
    t = threading.Thread(target=load_batch, args=(ready, release), name="MainThread-like")
    t.start()
    try:
        ready.wait(5)
        text = format_all_stacks()
    finally:
        release.set()
        t.join()
    threads = {th.name: th for th in parse_stacks(text)}
    assert "MainThread" in threads and "MainThread-like" in threads
    blocked = threads["MainThread-like"]
    # Innermost first: threading's wait, then load_batch, which is ours.
    assert blocked.frames[0].function == "wait"
    user = next(f for f in blocked.frames if not f.library)
    assert user.function == "load_batch" and user.file == __file__
    # The main thread is this test, which is in user code at its innermost frame
    # (format_all_stacks itself lives in the trainprobe package: a library frame).
    assert stuck_at(text).startswith("test_stackframes.py:")
    # Named by its ident (as the hook announces the training thread), the other one.
    assert blocked.ident == t.ident
    place = stuck_at(text, (t.ident,))
    assert place.startswith("test_stackframes.py:") and " in load_batch (innermost: " in place


def test_faulthandler_output_finds_the_main_thread_without_names() -> None:
    ready, release = threading.Event(), threading.Event()
    t = threading.Thread(target=load_batch, args=(ready, release))
    t.start()
    try:
        ready.wait(5)
        with tempfile.TemporaryFile("w+") as fh:
            faulthandler.dump_traceback(fh, all_threads=True)
            fh.seek(0)
            text = fh.read()
    finally:
        release.set()
        t.join()
    threads = parse_stacks(text)
    assert len(threads) >= 2 and all(th.name == "" for th in threads)
    assert sum(th.state == "current" for th in threads) == 1
    worker = next(th for th in threads if any(f.function == "load_batch" for f in th.frames))
    assert not worker.is_main  # its outermost frame is threading's, not <module>
    assert stuck_at(text).startswith("test_stackframes.py:")


RAY_TRAIN_PY_SPY = """\
Thread 4100 (idle): "MainThread"
    main_loop (/venv/lib/python3.11/site-packages/ray/_private/worker.py:1069)
    <module> (/venv/lib/python3.11/site-packages/ray/_private/workers/default_worker.py:330)
Thread 4188 (idle): "Thread-7 (train_fn)"
    train_func (/job/train.py:88)
    run (/venv/lib/python3.11/site-packages/ray/train/v2/_internal/execution/worker.py:61)
Thread 4190 (idle): "trainprobe-reporter"
    select (/usr/lib/python3.11/selectors.py:468)
"""


def test_under_ray_train_the_training_thread_is_not_the_main_one() -> None:
    # By its OS id, as the hook announced it...
    assert stuck_at(RAY_TRAIN_PY_SPY, (0x7F00, 4188)) == "train.py:88 in train_func"
    # ...and without it, the thread running user code rather than Ray's main loop.
    assert stuck_at(RAY_TRAIN_PY_SPY) == "train.py:88 in train_func"


def test_nothing_readable_is_nowhere() -> None:
    assert stuck_at("") == ""
    assert stuck_at("Error: Failed to get process executable name") == ""
    (empty,) = parse_stacks('Thread 0x1 "x" (most recent call last):\n')
    assert empty.name == "x" and empty.frames == ()
    assert stuck_at('Thread 0x1 "x" (most recent call last):\n') == ""
