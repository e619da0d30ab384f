"""The engine's tick and hang path, driven by a fake clock and a fake killer.

What is faked and why: the killer (``FakeKiller``) records whom it was asked
to kill instead of signalling, so a unit test never sends a real signal; the
clock is a plain float. Registry, rules, episodes, policy, Actions and the
incident log are the real ones.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.core_builders import connected, report
from trainprobe.sidecar.act.actions import Actions
from trainprobe.sidecar.act.incident_log import IncidentLog, read_incident_log
from trainprobe.sidecar.core.hang import CulpritPolicy
from trainprobe.sidecar.core.hang.patience import PatienceBook
from trainprobe.sidecar.core.incident import ActionPolicy
from trainprobe.sidecar.core.job import JobView, SyncReply
from trainprobe.sidecar.core.judge import RuleConfig
from trainprobe.sidecar.core.session import GroupSeqData, Registry, StallPolicy, SyncData, Verdict
from trainprobe.sidecar.core.session.model import WorkerState
from trainprobe.sidecar.engine import Engine
from trainprobe.sidecar.ray.link import RayLink
from trainprobe.sidecar.transport.commander import Commander

T0 = 100.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeKiller:
    """Records kills; the process 'exits' at once (no signal is sent)."""

    link: RayLink | None = None

    def __init__(self) -> None:
        self.killed: list[tuple[str, int, bool]] = []

    async def kill(self, state: WorkerState, grace_s: float, restart: bool) -> dict[str, object]:
        self.killed.append((state.hello.job_id, state.hello.rank, restart))
        return {"pid": state.hello.pid, "method": "fake", "exited": True, "error": ""}

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


def build(
    tmp_path: Path,
    policy: ActionPolicy | None = None,
    job_view: JobView | None = None,
    forget_after_s: float = 60.0,
    patience_s: float | None = 0.0,
) -> tuple[Engine, Registry, FakeKiller, Clock, IncidentLog]:
    """An engine whose hang path acts at once (``patience_s=0``) unless told otherwise."""
    clock = Clock()
    reg = Registry(forget_after_s=forget_after_s)
    log = IncidentLog(tmp_path / "incidents.jsonl")
    killer = FakeKiller()
    policy = policy or ActionPolicy()
    actions = Actions(reg, Commander(), log, killer, kill_grace_s=0.0, clock=clock)
    rules = RuleConfig(stall=StallPolicy(timeout_s=3.0), heartbeat_timeout_s=1e6)
    engine = Engine(
        reg,
        rules,
        policy,
        log,
        actions,
        clock=clock,
        wall_clock=lambda: 1.7e9 + clock.now,
        culprits=CulpritPolicy("kill_stalled", job_kill_grace_s=10.0),
        job_view=job_view,
        patience=PatienceBook(setting_s=patience_s),
    )
    # This fake clock jumps seconds between ticks, which the engine would take
    # for its own loop freezing (tests/unit/test_own_clock.py covers that).
    engine.freeze_after_s = float("inf")
    return engine, reg, killer, clock, log


def seq(issued: int, completed: int, inflight_since_s: float = 0.0) -> SyncData:
    """Collective sequence numbers of the default group (``watch_ddp``)."""
    start = int(inflight_since_s * 1e9) if issued > completed else 0
    return SyncData(
        groups=(GroupSeqData("default", issued, completed, start, "allreduce", issued),)
    )


def records(log: IncidentLog, kind: str) -> list[dict[str, object]]:
    log.flush()
    return [r for r in read_incident_log(log.path) if r.get("type") == kind]


def test_a_stalled_worker_gets_one_incident_and_one_kill(tmp_path: Path) -> None:
    engine, reg, killer, clock, log = build(tmp_path)

    async def run() -> None:
        w = connected(reg, 0, T0, world=1)
        reg.apply(w, report(T0 + 1, step=5), T0 + 1)
        clock.now = T0 + 2
        assert engine.tick() == []  # 1 s without a step: below the 3 s threshold
        reg.apply(w, report(T0 + 4.5, step=5, step_t_s=T0 + 1, seq=2), T0 + 4.5)
        clock.now = T0 + 4.5
        opened = engine.tick()
        assert [(i.rule, i.verdict, i.targets) for i in opened] == [("stall", Verdict.HUNG, [0])]
        assert w.verdict is Verdict.HUNG
        clock.now = T0 + 4.6
        assert engine.tick() == []  # still firing: no second incident
        await engine.drain()

    asyncio.run(run())
    assert killer.killed == [("job", 0, False)]
    (incident,) = records(log, "incident")
    (action,) = records(log, "action")
    assert action["incident_id"] == incident["id"] and action["ok"] is True


def test_the_hang_path_kills_the_straggler_alone(tmp_path: Path) -> None:
    """Ranks 0 and 2 wait in allreduce #8; rank 1 never entered it: rank 1 alone dies."""
    engine, reg, killer, clock, log = build(tmp_path)

    async def run() -> None:
        ws = [connected(reg, r, T0, world=3) for r in range(3)]
        for r, w in enumerate(ws):
            sync = seq(7, 7) if r == 1 else seq(8, 7, inflight_since_s=T0 + 1)
            reg.apply(w, report(T0 + 1, step=7, sync=sync), T0 + 1)
        for r, w in enumerate(ws):  # fresh reports, no step since T0+1
            sync = seq(7, 7) if r == 1 else seq(8, 7, inflight_since_s=T0 + 1)
            reg.apply(w, report(T0 + 4.5, step=7, step_t_s=T0 + 1, seq=2, sync=sync), T0 + 4.5)
        clock.now = T0 + 4.5
        opened = engine.tick()
        assert opened, "the stall must open an incident"
        await engine.drain()

    asyncio.run(run())
    assert killer.killed == [("job", 1, False)]
    incident = records(log, "incident")[0]
    diag = incident["diagnosis"]
    assert isinstance(diag, dict) and diag["culprits"] == [1] and diag["kind"] == "straggler"


def test_an_ambiguous_stall_gets_its_verdict_now_and_no_kill_before_patience(
    tmp_path: Path,
) -> None:
    """A stalled rank with no definitive evidence (no /proc facts: it is not a
    verified local process) is HUNG at once and waits for the default patience."""
    engine, reg, killer, clock, log = build(tmp_path, patience_s=None)

    async def run() -> None:
        w = connected(reg, 0, T0, world=1)
        reg.apply(w, report(T0 + 4.5, step=5, step_t_s=T0 + 1), T0 + 4.5)
        clock.now = T0 + 4.5
        assert [(i.rule, i.verdict) for i in engine.tick()] == [("stall", Verdict.HUNG)]
        await asyncio.sleep(1.5)  # a watch round or two: evidence, no action
        assert w.verdict is Verdict.HUNG and killer.killed == []

    asyncio.run(run())
    assert killer.killed == []
    assert records(log, "incident") and not records(log, "action")


def test_dry_run_logs_the_kill_and_kills_nobody(tmp_path: Path) -> None:
    engine, reg, killer, clock, log = build(tmp_path, ActionPolicy(dry_run=True))

    async def run() -> None:
        w = connected(reg, 0, T0, world=1)
        reg.apply(w, report(T0 + 5, step=5, step_t_s=T0 + 1), T0 + 5)
        clock.now = T0 + 5
        assert engine.tick()
        await engine.drain()

    asyncio.run(run())
    assert killer.killed == []
    (action,) = records(log, "action")
    assert action["dry_run"] is True


def test_the_kill_budget_turns_kills_into_observation(tmp_path: Path) -> None:
    engine, reg, killer, clock, log = build(tmp_path, ActionPolicy(max_kills_per_hour=1))

    async def run() -> None:
        for i, job in enumerate(("a", "a")):
            w = connected(reg, 0, T0 + 10 * i, job=job, world=1, pid=2000 + i)
            t = T0 + 10 * i
            reg.apply(w, report(t + 5, step=5, step_t_s=t + 1), t + 5)
            clock.now = t + 5
            engine.tick()
            await engine.drain()
            reg.close(w, w.generation, "vanished", t + 6, pid_alive=False)
            clock.now = t + 6
            engine.tick()

    asyncio.run(run())
    assert len(killer.killed) == 1
    second = records(log, "decision")[1]
    assert second["action"] == "observe" and "max_kills_per_hour" in str(second["action_reason"])


def test_a_finished_job_leaves_no_state_behind(tmp_path: Path) -> None:
    """JobView (what Ray's coordinator said of a job) is dropped with its last session."""
    view = JobView()
    engine, reg, _, clock, _ = build(tmp_path, job_view=view, forget_after_s=5.0)
    w = connected(reg, 0, T0, job="done", world=1)
    reg.apply(w, report(T0 + 1, step=1), T0 + 1)
    view.update("done", SyncReply((), None), T0 + 1)

    async def run() -> None:
        reg.close(w, w.generation, "goodbye", T0 + 2, pid_alive=False)
        clock.now = T0 + 3
        engine.tick()
        assert "done" in view  # ended, but not yet forgotten
        clock.now = T0 + 8
        engine.tick()

    asyncio.run(run())
    assert len(reg) == 0
    assert "done" not in view and len(view) == 0
