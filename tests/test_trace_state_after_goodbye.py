"""What a session's trace state leaves once its worker said Goodbye.

A real in-process sidecar (telemetry on, as shipped) and real gRPC streams:
workers report steps, then say Goodbye. The trace builder kept each worker's
state (its step history, ~5 KiB) until the sidecar had applied 4,096 more
reports: after a wave of sessions ended and no more came, all of it stayed.
It is dropped with the collection that follows the wave.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support import wait_for
from tests.test_bad_input import hello, report, run_stream
from trainprobe.proto import probe_pb2
from trainprobe.sidecar import SidecarThread, load_settings
from trainprobe.sidecar.transport.reclaim import COLLECT_AFTER_CLOSE_S


def test_a_wave_of_goodbyes_leaves_no_trace_state(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    settings = load_settings(cli={"listen": [f"unix://{sock}"], "state_dir": str(tmp_path)})
    assert settings.telemetry  # the shipped default
    with SidecarThread(settings) as st:
        side = st.sidecar
        assert side is not None and side.telemetry is not None
        builder = side.telemetry.builder

        def session(rank: int, goodbye: bool) -> None:
            now = time.monotonic_ns()
            steps = [
                report(
                    seq=i,
                    mono_ns=now + i * 1_000_000,
                    last_step=i,
                    total_steps=i,
                    recent_steps=[i],
                    recent_step_end_mono_ns=[now + i * 1_000_000 - 1000],
                    recent_step_s=[0.001],
                )
                for i in range(1, 6)
            ]
            bye = [probe_pb2.WorkerMessage(goodbye=probe_pb2.Goodbye())] if goodbye else []
            first = hello(rank=rank, job="wave", world_size=8)
            assert run_stream(f"unix://{sock}", [first, *steps, *bye]) is None

        for rank in range(6):
            session(rank, goodbye=rank != 5)  # the last one vanishes: its exit may need spans
        assert len(builder) == 6
        time.sleep(COLLECT_AFTER_CLOSE_S)
        wait_for(lambda: len(builder) == 1, 10, what="the trace state of the Goodbyes dropped")
        assert [wt.hello.rank for wt in builder._workers.values()] == [5]
