"""A kill's outcome from a relay node is the node's word, bounded as any input
is: a token holder's own ``Relay`` stream, given the kill order of a rank it
vouched for, answers with a huge error, thousands of huge signal names, a NaN
duration and hostile descendants; the upstream's action record keeps each
within its bound. Real upstream sidecar, a raw-gRPC rogue stream.
"""

from __future__ import annotations

import math
import time

from tests.support import SidecarProcess, short_tmpdir, wait_for
from tests.test_impostors import running
from tests.test_relay_trust import FAST, RogueRelay
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2


def test_a_rogue_nodes_kill_result_is_bounded_in_the_action_record() -> None:
    up = SidecarProcess(short_tmpdir("rkup-"), *FAST, "--heartbeat-timeout-s", "1")
    with up:
        hello = probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION, hook_version="rogue", job_id="rogue-own",
            rank=0, world_size=1, host="elsewhere", pid=4_000_000, interval_ms=100,
        )  # fmt: skip
        rogue = RogueRelay(up.target, hello)
        with running(rogue):
            order = wait_for(
                lambda: next((c for c in rogue.got if c.WhichOneof("kind") == "kill"), None),
                30,
                what="the kill order of the rogue's own silent rank",
            )
            left = probe_pb2.LeftAlone(pid=7, ppid=1, name="n\x1b[2J" * 100, reason="r" * 2000)
            result = probe_pb2.RelayKillResult(
                kill_id=order.kill.kill_id,
                exited=True,
                error="\x1b]0;owned\x07" + "e" * 300_000,
                signals=["S" * 1000] * 1000,  # with the rest, under 4 MiB
                seconds=math.nan,
                skipped=[left] * 600,
            )
            rogue._out.put(
                probe_pb2.RelayBatch(
                    items=[probe_pb2.RelayItem(stream_id=1, kill_result=result)], interval_ms=100
                )
            )
            action = wait_for(
                lambda: next((a for a in up.incidents("action") if a.get("outcomes")), None),
                30,
                what="the action record",
            )
            time.sleep(0.2)
    out = next(iter(action["outcomes"].values()))
    assert len(out["error"]) <= 1024, len(out["error"])
    assert len(out["signals"]) <= 16 and all(len(s) <= 16 for s in out["signals"])
    assert out["seconds"] is None or (
        isinstance(out["seconds"], float) and math.isfinite(out["seconds"])
    ), out["seconds"]
    assert len(out["skipped"]) <= 512
    assert all(len(s["name"]) <= 64 and len(s["reason"]) <= 1024 for s in out["skipped"])
