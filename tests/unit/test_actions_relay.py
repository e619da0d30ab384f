"""Actions and the relay upstream's kill orders, without processes or sockets.

Faked, and why: a worker's command stream is a ``Worker`` sink that answers
commands in-process (no gRPC stream), and the killer is ``FakeKiller`` (no
signal is ever sent from a unit test). Actions, the Commander, the incident
log and the relay upstream's NodeStream are the real ones.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.core_builders import connected
from tests.unit.test_engine import FakeKiller
from trainprobe.proto import probe_pb2
from trainprobe.sidecar.act.actions import Actions
from trainprobe.sidecar.act.incident_log import IncidentLog, read_incident_log
from trainprobe.sidecar.core.incident import Action, Incident
from trainprobe.sidecar.core.session import Registry, Verdict, WorkerKey
from trainprobe.sidecar.relay.routes import RELAY_KILL_MARGIN_S, NodeStream, RelayRoute
from trainprobe.sidecar.transport.commander import Commander


class Worker:
    """A session's command sink that answers DumpStacks like a live hook would."""

    def __init__(self, commander: Commander, stacks: str, key: WorkerKey) -> None:
        self.commander = commander
        self.stacks = stacks
        self.key = key  # the session whose stream carries the answer

    def put_nowait(self, command: probe_pb2.Command) -> None:
        result = probe_pb2.CommandResult(command_id=command.id, ok=True, python_stacks=self.stacks)
        asyncio.get_running_loop().call_soon(self.commander.resolve, result, self.key)


def incident(action: str, targets: list[int], dry_run: bool = False) -> Incident:
    inc = Incident(
        id="i-1",
        time=1.7e9,
        detected_at=100.0,
        job_id="job",
        rule="stall",
        verdict=Verdict.HUNG,
        ranks=targets,
        pids=[1000 + r for r in targets],
        hosts=["node-a"],
        evidence={},
        onset_at=99.0,
    )
    inc.action, inc.targets, inc.dry_run = action, targets, dry_run
    return inc


def setup(tmp_path: Path) -> tuple[Actions, Registry, Commander, FakeKiller, IncidentLog]:
    reg, commander, killer = Registry(), Commander(), FakeKiller()
    log = IncidentLog(tmp_path / "incidents.jsonl")
    return Actions(reg, commander, log, killer, kill_grace_s=0.0), reg, commander, killer, log


def test_each_action_does_what_it_says(tmp_path: Path) -> None:
    actions, reg, commander, killer, log = setup(tmp_path)
    heard: list[str] = []
    actions.listeners.append(lambda inc, rec: heard.append(str(rec["action"])))

    async def run() -> None:
        for rank in (0, 1):
            w = connected(reg, rank)
            commander.attach(w.key, w.generation, Worker(commander, f"stack of {rank}", w.key))
        await actions.execute(incident(Action.OBSERVE, [0]))
        await actions.execute(incident(Action.DUMP, [0, 1]))
        await actions.execute(incident(Action.KILL, [1], dry_run=True))
        await actions.execute(incident(Action.RESTART, [1]))

    asyncio.run(run())
    log.flush()
    recs = [r for r in read_incident_log(log.path) if r["type"] == "action"]
    assert [r["action"] for r in recs] == ["dump", "kill", "restart"]  # observe logs nothing
    assert recs[0]["stacks"] == {"0": "stack of 0", "1": "stack of 1"}
    assert recs[1]["dry_run"] is True
    assert killer.killed == [("job", 1, True)]  # the dry run killed nobody
    assert heard == ["dump", "kill", "restart"]
    killed = [w.hello.rank for w in reg if w.killed_by_us]
    assert killed == [1]


def test_a_relayed_kill_order_goes_down_and_its_outcome_comes_back() -> None:
    async def run() -> None:
        stream = NodeStream("node-a")
        route = RelayRoute(stream, stream_id=7)
        pending = asyncio.ensure_future(route.kill(pid=4242, grace_s=1.0))
        order = await asyncio.wait_for(stream.out.get(), 1.0)
        assert order.stream_id == 7 and order.kill.grace_s == 1.0
        stream.resolve(
            probe_pb2.RelayKillResult(
                kill_id=order.kill.kill_id, signals=["SIGTERM"], exited=True, seconds=0.2
            )
        )
        record = await asyncio.wait_for(pending, 1.0)
        assert record["method"] == "relay-signal" and record["exited"] is True
        assert record["signals"] == ["SIGTERM"] and record["pid"] == 4242

        # The node's stream ends before it answers: the kill says so, at once.
        pending = asyncio.ensure_future(route.kill(pid=4243, grace_s=1.0))
        await asyncio.wait_for(stream.out.get(), 1.0)
        stream.close()
        record = await asyncio.wait_for(pending, 1.0)
        assert record["exited"] is False and "ended before" in str(record["error"])
        # And a later order is refused without waiting out the margin.
        record = await asyncio.wait_for(route.kill(pid=4244, grace_s=1.0), 1.0)
        assert "cannot be reached" in str(record["error"])
        assert RELAY_KILL_MARGIN_S > 1.0

    asyncio.run(run())


def test_a_session_cannot_answer_another_sessions_command() -> None:
    """Command ids are global; a result counts only from the session asked."""

    async def run() -> None:
        commander = Commander()
        victim, forger = WorkerKey("job", 0), WorkerKey("job", 1)
        sent: list[probe_pb2.Command] = []

        class Silent:
            def put_nowait(self, command: probe_pb2.Command) -> None:
                sent.append(command)

        commander.attach(victim, 1, Silent())
        asked = asyncio.ensure_future(
            commander.request(victim, 0.5, dump_stacks=probe_pb2.DumpStacks())
        )
        await asyncio.sleep(0.05)
        forged = probe_pb2.CommandResult(command_id=sent[0].id, ok=True, python_stacks="fake")
        commander.resolve(forged, forger)
        assert await asked is None  # timed out: the forged answer was ignored
        asked = asyncio.ensure_future(
            commander.request(victim, 1.0, dump_stacks=probe_pb2.DumpStacks())
        )
        await asyncio.sleep(0.05)
        real = probe_pb2.CommandResult(command_id=sent[1].id, ok=True, python_stacks="real")
        commander.resolve(real, victim)
        result = await asked
        assert result is not None and result.python_stacks == "real"

    asyncio.run(run())
