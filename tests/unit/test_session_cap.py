"""The shipped session cap holds at its real size (10,000), and churn stays within it."""

from __future__ import annotations

import pytest

from tests.core_builders import hello, report
from trainprobe.sidecar.core.limits import MAX_ENDED_SESSIONS, MAX_SESSIONS
from trainprobe.sidecar.core.session import Registry, RegistryError


def test_ten_thousand_live_sessions_then_one_more_is_refused() -> None:
    reg = Registry()
    assert reg.max_sessions == MAX_SESSIONS == 10_000
    states = [
        reg.open(hello(rank=r, job="cap", pid=1000 + r, world=MAX_SESSIONS), 1.0)
        for r in range(MAX_SESSIONS)
    ]
    for s in states[:100]:
        reg.apply(s, report(2.0, step=1, durations=(0.1,)), 2.0)
    with pytest.raises(RegistryError) as err:
        reg.open(hello(rank=0, job="one-too-many", pid=99), 3.0)
    assert err.value.code == "RESOURCE_EXHAUSTED"
    assert len(reg) == MAX_SESSIONS
    # Three rounds of churn: each round's sessions end, the next round's open.
    for round_ in range(3):
        for s in reg.workers():
            if s.connected:
                reg.close(s, s.generation, "goodbye", 10.0 + round_, None)
        for r in range(MAX_SESSIONS):
            reg.open(
                hello(rank=r, job=f"churn{round_}", pid=50_000 + r, world=MAX_SESSIONS),
                11.0 + round_,
            )
        assert len(reg) == MAX_SESSIONS
        assert sum(1 for w in reg if not w.connected) == 0  # the ended went first
    ended = 0
    for s in reg.workers()[: MAX_ENDED_SESSIONS + 500]:
        reg.close(s, s.generation, "vanished", 20.0, None)
        ended += 1
    assert len(reg) == MAX_SESSIONS - (ended - MAX_ENDED_SESSIONS)  # at most 1,000 ended kept
