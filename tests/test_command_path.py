"""Commands from a real sidecar to a real hook, over the Connect stream.

A command is acted on when it arrives, not with the next report: the hook
reads its stream beside the reports it writes, and the sidecar writes a
command as soon as it has one. And a stack dump leaves nothing behind: the
frames it read were pinned by a reference cycle (the dump's own frame held
the dict of every thread's frames, its own among them) until the cyclic GC
ran. A training thread waiting in torchft's replicated allreduce when the
sidecar read its stack then kept that allreduce's gloo work, and with it the
group's sockets, after the work had failed: a survivor on the far side of
gloo's ring, whose neighbours' sockets stayed open, waited for the next
quorum (the lighthouse's 10 s join timeout) instead of failing at once when
the evicted replica died. How often the GC came in time depended on how much
the process allocated (the report interval, the load).
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import wait_for
from trainprobe.hooks import LivenessProbeHook
from trainprobe.hooks.watch import notices
from trainprobe.proto import probe_pb2
from trainprobe.sidecar import SidecarThread, load_settings
from trainprobe.sidecar.core.session.model import WorkerKey

#: Longer than any wait here: a command that waited for a report would time out.
INTERVAL_MS = 60_000
KEY = WorkerKey("cmdpath", 0)


class Held:
    """What a waiting frame holds (torchft's work, say); weakly referenced."""


@pytest.fixture
def connected(tmp_path: Path) -> Iterator[SidecarThread]:
    sock = tmp_path / "s.sock"
    settings = load_settings(cli={"listen": [f"unix://{sock}"], "state_dir": str(tmp_path)})
    with SidecarThread(settings) as st:
        hook = LivenessProbeHook(
            target=f"unix://{sock}",
            job_id=KEY.job_id,
            rank=0,
            world_size=2,
            interval_ms=INTERVAL_MS,
        )
        try:
            side = st.sidecar
            assert side is not None
            wait_for(lambda: side.commander.connected(KEY), 20, 0.02, "the hook's session")
            yield st
        finally:
            hook.close()


def request(st: SidecarThread, **kind: object) -> probe_pb2.CommandResult | None:
    side = st.sidecar
    assert side is not None
    return st.call_async(lambda: side.commander.request(KEY, 10.0, **kind), timeout_s=15)


def test_a_notice_is_acted_on_at_once_not_at_the_next_report(connected: SidecarThread) -> None:
    notice = probe_pb2.Notice(
        incident_id="i-cmd", job_id=KEY.job_id, killed_ranks=[1], verdict="HUNG", rule="stopped"
    )
    t0 = time.monotonic()
    result = request(connected, notice=notice)
    # Answered (after the hook kept and logged it) long before a report is due.
    assert result is not None and result.ok and result.method == "logged", result
    assert time.monotonic() - t0 < INTERVAL_MS / 1000 / 6
    latest = notices.latest()
    assert latest is not None and "[incident i-cmd]" in latest.line


def test_a_stack_dump_keeps_no_frame_of_a_waiting_thread_alive(connected: SidecarThread) -> None:
    waiting, release = threading.Event(), threading.Event()
    refs: list[weakref.ref[Held]] = []

    def wait_in_a_collective() -> None:
        work = Held()
        refs.append(weakref.ref(work))
        waiting.set()
        release.wait(30)

    thread = threading.Thread(target=wait_in_a_collective, name="training")
    gc.disable()  # the cyclic GC, when it comes, hides the leak
    try:
        thread.start()
        assert waiting.wait(10)
        result = request(connected, dump_stacks=probe_pb2.DumpStacks())
        assert result is not None and "wait_in_a_collective" in result.python_stacks, result
        release.set()
        thread.join(10)
        # Once its frame is done, what it held goes with it, GC or not.
        assert refs[0]() is None, "the stack dump kept the waiting frame's locals alive"
    finally:
        release.set()
        gc.enable()
