"""End to end relay mode: real gloo workers -> a node sidecar (--relay-to) -> an upstream.

Both sidecars are real processes on private Unix sockets; the workers are
real torch.distributed (gloo) ranks with the hook, connected to the node.
"""

from __future__ import annotations

import json
import os
import signal
import time

import grpc
import pytest

from tests.support import SidecarProcess, Workers, short_tmpdir, wait_for
from trainprobe.proto import probe_pb2, probe_pb2_grpc

pytestmark = pytest.mark.slow


def _pair(*upstream_flags: str) -> tuple[SidecarProcess, SidecarProcess]:
    up = SidecarProcess(short_tmpdir("tpup-"), *upstream_flags)
    node = SidecarProcess(short_tmpdir("tpnode-"), "--relay-to", up.target)
    return up, node


def _workers(up: SidecarProcess, job: str) -> dict[int, str]:
    """rank -> state of the job's workers, as the upstream sees them."""
    try:
        reply = up.status(job)
    except Exception:  # the upstream is (re)starting
        return {}
    return {w.rank: w.state for w in reply.workers}


def test_upstream_detects_stopped_worker_and_node_kills_it() -> None:
    # The upstream cannot read a relayed worker's /proc; the node can, and sends up
    # that its worker is stopped (relay/held.py): definitive, so the kill comes at once.
    up, node = _pair(
        "--heartbeat-timeout-s", "3", "--stall-timeout-s", "600", "--hang-patience-s", "0"
    )
    with up, node:
        args = ["--steps", "2000", "--step-s", "0.02", "--hang-rank", "1", "--hang-at", "10"]
        with Workers(
            2, node.target, short_tmpdir(), job_id="rstop", args=[*args, "--hang-how", "stop"]
        ) as w:
            states = wait_for(lambda: len(_workers(up, "rstop")) == 2 and _workers(up, "rstop"), 60)
            assert states == {0: "connected", 1: "connected"}
            assert list(node.status().workers) == []  # the node runs no rules and keeps no registry
            inc = up.wait_incident(lambda r: r["rule"] == "heartbeat", timeout_s=60)
            assert inc["verdict"] == "UNRESPONSIVE" and inc["ranks"] == [1]
            assert inc["pids"] == [w.pids[1]]
            action = wait_for(lambda: up.incidents("action"), 30, what="kill record")[0]
            decision = next(d for d in up.incidents("decision") if d.get("act"))
            assert decision["rule"] == "stopped" and decision["definitive"], decision
            outcome = action["outcomes"]["1"]
            # Signalled by the node, whose outcome came back up the relay.
            assert outcome["method"] == "relay-signal", outcome
            # Stopped: the node SIGKILLed it as it was, never resumed it.
            assert outcome["exited"] and outcome["signals"] == ["SIGKILL"]
            assert outcome["signalled_first"] == "SIGKILL"
            assert not outcome["error"]
            assert w.wait(30)[1] is not None  # the stopped process is really gone
            assert f"killed worker pid {w.pids[1]} for the upstream" in node.log_text()
            assert "heartbeat" not in node.log_text()


def test_commands_reach_relayed_workers_and_results_come_back() -> None:
    """on_hung=dump: DumpStacks goes down the relay, each hook's stacks come back up."""
    up, node = _pair("--stall-timeout-s", "2", "--on-hung", "dump", "--heartbeat-timeout-s", "30")
    args = ["--steps", "2000", "--step-s", "0.02", "--hang-rank", "1", "--hang-at", "10"]
    with up, node, Workers(2, node.target, short_tmpdir(), job_id="rdump", args=args):
        up.wait_incident(lambda r: r["rule"] == "stall", timeout_s=60)
        dump = wait_for(
            lambda: [a for a in up.incidents("action") if a["action"] == "dump"], 30, what="dump"
        )[0]
        assert dump["ok"] and dump["unanswered"] == [], dump
        # Each hook answered over the relay with its threads' stacks (the training loop's).
        assert dump["stacks"] and all("ddp_worker.py" in t for t in dump["stacks"].values())


def test_goodbye_and_vanished_are_told_apart() -> None:
    up, node = _pair("--heartbeat-timeout-s", "30", "--stall-timeout-s", "600")
    with up, node:
        wd = short_tmpdir()
        with (
            Workers(
                1, node.target, wd, job_id="rok", args=["--steps", "15", "--step-s", "0.02"]
            ) as ok,
            Workers(
                1,
                node.target,
                wd,
                job_id="rexit",
                args=[
                    "--steps",
                    "400",
                    "--step-s",
                    "0.02",
                    "--hang-rank",
                    "0",
                    "--hang-at",
                    "10",
                    "--hang-how",
                    "exit",
                ],
            ),
        ):
            inc = up.wait_incident(lambda r: r["rule"] == "exit", timeout_s=60)
            assert inc["job_id"] == "rexit" and inc["verdict"] == "DEAD"
            # The node looked at the pid when the stream broke: it was gone.
            assert inc["evidence"]["0"]["pid_alive"] is False
            assert ok.wait(60) == [0]
            wait_for(lambda: _workers(up, "rok") == {0: "goodbye"}, 10, what="goodbye upstream")
            assert _workers(up, "rexit") == {0: "vanished"}
            assert not up.incidents(job="rok")


def test_node_survives_upstream_restart_and_reregisters_workers() -> None:
    up, node = _pair("--heartbeat-timeout-s", "30", "--stall-timeout-s", "600")
    node.start()  # the upstream is not there yet
    try:
        with Workers(
            2,
            node.target,
            short_tmpdir(),
            job_id="rre",
            args=["--steps", "100000", "--step-s", "0.01"],
        ) as w:
            wait_for(lambda: w.max_step() > 5, 60, what="training while the upstream is down")
            up.start()
            wait_for(lambda: len(_workers(up, "rre")) == 2, 30, what="workers upstream")
            up.stop()
            step = w.max_step()
            wait_for(lambda: w.max_step() > step + 50, 30, what="training on without the upstream")
            assert all(p.poll() is None for p in w.procs)
            up.start()  # a fresh registry: only the node's re-sent Hellos can fill it
            states = wait_for(lambda: len(_workers(up, "rre")) == 2 and _workers(up, "rre"), 30)
            assert states == {0: "connected", 1: "connected"}
            step = max(w.step for w in up.status("rre").workers)
            wait_for(
                lambda: max(w.step for w in up.status("rre").workers) > step, 10, what="reports"
            )
            assert not up.incidents()
            assert node.log_text().count("is down") == 2  # once per outage, not per retry
    finally:
        node.stop()
        up.stop()


def test_node_sigterm_leaves_workers_alone() -> None:
    """Stopping the node signals no worker, and the upstream does not call them dead."""
    up, node = _pair()
    with (
        up,
        node,
        Workers(
            1,
            node.target,
            short_tmpdir(),
            job_id="rterm",
            args=["--steps", "100000", "--step-s", "0.01"],
        ) as w,
    ):
        wait_for(lambda: len(_workers(up, "rterm")) == 1, 60)
        node.stop(signal.SIGTERM)
        wait_for(lambda: _workers(up, "rterm") == {0: "relay_lost"}, 10, what="relay_lost")
        assert w.procs[0].poll() is None
        os.kill(w.pids[0], 0)
        assert not up.incidents()


def _diagnosis(up: SidecarProcess, job: str) -> dict:  # type: ignore[type-arg]
    with grpc.insecure_channel(up.target) as ch:
        reply = probe_pb2_grpc.SidecarStub(ch).Diagnose(
            probe_pb2.DiagnoseRequest(job_id=job), timeout=10
        )
    return json.loads(reply.json)


def test_a_long_relay_interval_makes_no_healthy_rank_unresponsive() -> None:
    # A node batching every 4 s (within the option's range) hands the upstream
    # reports up to ~4 s old. Neither the heartbeat rule (it gave UNRESPONSIVE past
    # 3 s) nor the culprit analysis (it took a report over 1 s old for a silent
    # rank, so a healthy relayed rank could be named the culprit of another
    # rank's hang) may take that for silence.
    up = SidecarProcess(short_tmpdir("tpup-"))
    node = SidecarProcess(
        short_tmpdir("tpnode-"), "--relay-to", up.target, "--relay-interval-ms", "4000"
    )
    with up, node:
        args = ["--steps", "1500", "--step-s", "0.02"]
        with Workers(2, node.target, short_tmpdir(), job_id="rslow", args=args) as w:
            wait_for(lambda: len(_workers(up, "rslow")) == 2, 60)
            silent = []
            for _ in range(20):  # about 10 s: more than two batch intervals
                time.sleep(0.5)
                diag = _diagnosis(up, "rslow")
                # Between hangs the analysis may read ranks a few steps apart as a
                # straggler (it is asked only once a rule fires); silence it must not see.
                if diag.get("kind") == "unresponsive":
                    silent.append(diag)
            codes = w.wait(120)
            assert codes == [0, 0], codes
        assert not silent, [(d["kind"], d["summary"]) for d in silent]
        bad = [r for r in up.incidents() if r.get("verdict") not in (None, "OK", "DEAD")]
        assert not bad, [(r["rule"], r["verdict"], r.get("ranks")) for r in bad]
