"""The hook's start-up phases, around a real init_process_group in this process."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from trainprobe.hooks import LivenessProbeHook


def active(hook: LivenessProbeHook) -> list[str]:
    return sorted(p.name for p in hook._phases.snapshot()[0])


def test_init_then_rendezvous_while_inside_init_process_group(tmp_path: Path) -> None:
    assert not dist.is_initialized()
    hook = LivenessProbeHook(
        target=f"unix://{tmp_path}/none.sock", start=False, rank=0, world_size=2
    )
    assert hook.startup is not None
    hook.startup.poll()
    assert active(hook) == ["init"]  # alive, not yet at the process group
    seen: list[list[str]] = []

    def look() -> None:  # the reporter thread's look, while training waits for rank 1
        time.sleep(1.0)
        hook.startup.poll()  # type: ignore[union-attr]
        seen.append(active(hook))

    looker = threading.Thread(target=look)
    looker.start()
    store = dist.FileStore(str(tmp_path / "store"), 2)
    # Rank 1 never comes: init_process_group waits for it, then gives up.
    with pytest.raises(Exception):  # noqa: B017 - torch's error type varies by version
        dist.init_process_group(
            "gloo", store=store, rank=0, world_size=2, timeout=timedelta(seconds=3)
        )
    looker.join()
    assert seen == [["init", "rendezvous"]]
    hook.startup.poll()
    assert active(hook) == ["init"]  # out of it again: not arrived any more
    hook.on_step_end(1)
    hook.startup.poll()
    assert active(hook) == [] and not hook.startup.open
    hook.close()


def test_no_start_up_phases_alone_or_after_the_process_group(tmp_path: Path) -> None:
    target = f"unix://{tmp_path}/none.sock"
    alone = LivenessProbeHook(target=target, start=False, rank=0, world_size=1)
    assert alone.startup is None and active(alone) == []
    alone.close()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        late = LivenessProbeHook(target=target, start=False, rank=0, world_size=2)
        assert late.startup is None and active(late) == []
        late.close()
    finally:
        dist.destroy_process_group()
