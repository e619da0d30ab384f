"""Live culprit diagnosis end to end: real sidecar, real gloo ranks, real hangs.

Each test names the rank that broke the job in the incident, says where it
is stuck (its stacks are read before anything is killed), and points the
action at that rank only. The ranks watch their DDP gradient allreduce
(``--watch-ddp``), so every report carries per-group collective sequence
numbers.

Since issue 12 a sleeping rank or a C call holding the GIL is ambiguous
evidence, acted on after ``hang_patience_s``: the tests of those set
``--hang-patience-s 0`` (act at the verdict) to test the naming and the
targeting; tests/test_detect_e2e.py tests the patience itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    Workers,
    ctl,
    free_port,
    short_tmpdir,
    sidecar,
    wait_for,
)
from trainprobe.sidecar.act.stacks import find_py_spy

pytestmark = pytest.mark.slow

#: Act at the verdict (no patience): these tests are about naming and targeting.
NOW = ("--hang-patience-s", "0")
FAST = ["--steps", "400", "--step-s", "0.02", "--interval-ms", "100", "--watch-ddp"]


def hang_args(rank: int, at: int, mode: str) -> list[str]:
    return [*FAST, "--hang-rank", str(rank), "--hang-at", str(at), "--hang-how", mode]


def span_attributes(traces: Path, incident_id: str, key: str) -> dict[str, Any]:
    """The attributes of the exported span of ``incident_id`` that has ``key`` (OTLP/JSON)."""
    for line in traces.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    attrs = {
                        a["key"]: next(iter(a["value"].values()), None)
                        for a in span.get("attributes", [])
                    }
                    if attrs.get("trainprobe.incident.id") == incident_id and key in attrs:
                        return attrs
    raise AssertionError(f"no span of incident {incident_id} with {key}")


def test_rank_sleeping_in_its_step_is_named_and_only_it_is_killed() -> None:
    """Rank 2 sleeps inside step 15; ranks 0, 1, 3 enter the gradient allreduce and wait."""
    with (
        sidecar("--sync-timeout-s", "2", "--stall-timeout-s", "8", *NOW) as sc,
        Workers(4, sc.target, short_tmpdir(), job_id="sleep4", args=hang_args(2, 15, "sleep")) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "sleep4", timeout_s=180)
        # The waiting peers trip sync_inflight first; the culprit is not among them.
        assert inc["rule"] == "sync_inflight" and inc["verdict"] == "HUNG"
        assert 2 not in inc["ranks"]
        d = inc["diagnosis"]
        assert d["kind"] == "straggler" and d["culprits"] == [2] and d["waiting"] == [0, 1, 3]
        assert d["confidence"] >= 0.9
        assert "rank 2 on " in d["text"] and "never entered allreduce #15" in d["text"]
        assert "not in any collective" in d["text"]
        # Where: read in process (the reporter thread still runs) before the kill.
        stacks = d["stacks"]["2"]
        assert stacks["method"] == "in-process" and "time.sleep(3600)" in stacks["stacks"]
        assert d["where"] == {"2": stacks["where"]} and "in hang" in stacks["where"]
        assert d["text"].endswith(f"rank 2 is stuck at {stacks['where']}")
        assert inc["targets"] == [2] and inc["action"] == "kill"
        assert 2.0 <= inc["detection_latency_s"] < 2.0 + 1.0
        action = wait_for(lambda: sc.incidents("action", job="sleep4"), 30, what="kill")[0]
        assert action["incident_id"] == inc["id"] and list(action["outcomes"]) == ["2"]
        assert action["outcomes"]["2"]["pid"] == w.pids[2] and action["outcomes"]["2"]["exited"]
        # The peers' allreduce fails once rank 2 is gone: they end by themselves.
        codes = w.wait(60)
        assert all(c is not None for c in codes), codes
        assert w.max_step() < 400
        # One incident for the whole episode: nothing more was opened or killed.
        wait_for(lambda: "hang episode" in sc.log_text() and "is over" in sc.log_text(), 30)
        assert [r["id"] for r in sc.incidents("incident", job="sleep4")] == [inc["id"]]
        assert len(sc.incidents("action", job="sleep4")) == 1
        # The incident span carries the same diagnosis, stacks included.
        sc.stop()  # flushes the exporters
        attrs = span_attributes(
            sc.state_dir / "traces.otlp.jsonl", inc["id"], "trainprobe.diagnosis"
        )
        exported = json.loads(attrs["trainprobe.diagnosis"])
        assert exported["culprits"] == [2] and exported["text"] == d["text"]
        assert exported["stacks"]["2"]["where"] == stacks["where"]
        # ...and the decision: what decided, and whether it acted at once.
        assert attrs["trainprobe.decision.rule"] == inc["decision"]["rule"]
        assert attrs["trainprobe.decision.act"] is inc["decision"]["act"]
        assert json.loads(attrs["trainprobe.decision"]) == inc["decision"]


def test_rank_calling_another_collective_is_named_and_diagnose_says_the_same() -> None:
    """At step 12 ranks 0, 2, 3 all-reduce a metric; rank 1 all-gathers it.

    The Flight Recorder is on (gloo records too): rank 1's entry in flight is
    attached to the incident.
    """
    args = [*FAST, "--mismatch-rank", "1", "--mismatch-at", "12"]
    fr = {"TORCH_FR_BUFFER_SIZE": "1000"}
    with (
        sidecar("--sync-timeout-s", "2", "--stall-timeout-s", "30", "--dry-run") as sc,
        Workers(4, sc.target, short_tmpdir(), job_id="mismatch4", args=args, env=fr) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "mismatch4", timeout_s=180)
        d = inc["diagnosis"]
        assert d["kind"] == "mismatch" and d["culprits"] == [1], d
        assert "rank 1: all_gather" in d["text"] and "rank 0: all_reduce" in d["text"]
        assert d["stacks"]["1"]["method"] == "in-process"
        assert "mismatched_collective" in d["stacks"]["1"]["stacks"]
        entries = d["stacks"]["1"]["flight_recorder"]["entries"]
        assert [e["profiling_name"] for e in entries] == ["gloo:all_gather"]
        assert entries[0]["collective_seq_id"] > 0 and entries[0]["retired"] is False
        assert inc["targets"] == [1] and inc["dry_run"] is True
        action = wait_for(lambda: sc.incidents("action", job="mismatch4"), 30, what="dry run")[0]
        assert action["dry_run"] is True and action["ranks"] == [1]
        # Live, during the hang: `trainprobe diagnose` prints the incident's text.
        out = ctl("diagnose", "--job", "mismatch4", "--target", sc.target)
        assert out.returncode == 0 and out.stdout.strip() == d["text"]
        raw = ctl("diagnose", "--job", "mismatch4", "--json", "--target", sc.target)
        record = json.loads(raw.stdout)
        assert record["culprits"] == [1] and record["episode"] == inc["id"]
        assert all(p.poll() is None for p in w.procs)  # a dry run kills nobody
        missing = ctl("diagnose", "--job", "nope", "--target", sc.target)
        assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_sigstopped_rank_is_named_and_its_stack_read_from_outside() -> None:
    """Rank 3 stops itself at step 10: no reports, no answer to DumpStacks."""
    with (
        sidecar("--heartbeat-timeout-s", "3", "--sync-timeout-s", "30") as sc,
        Workers(4, sc.target, short_tmpdir(), job_id="stop4", args=hang_args(3, 10, "stop")) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "stop4", timeout_s=180)
        # Read stopped in /proc before its heartbeat ran out (core/hang/stopped.py).
        assert inc["rule"] == "stopped" and inc["ranks"] == [3]
        d = inc["diagnosis"]
        assert d["kind"] == "unresponsive" and d["culprits"] == [3]
        assert d["waiting"] == [0, 1, 2] and d["confidence"] >= 0.9
        stacks = d["stacks"]["3"]
        # A stopped process cannot answer: the sidecar sees its state and does not
        # wait out the in-process timeout before the kill.
        assert stacks["attempts"][0]["method"] == "in-process"
        assert "process is stopped" in stacks["attempts"][0]["error"]
        assert not any("no answer" in a["error"] for a in stacks["attempts"])
        if find_py_spy("auto"):
            # py-spy reads a stopped process without resuming it (--nonblocking).
            assert stacks["method"] == "py-spy" and "in hang" in stacks["where"]
        else:
            methods = [a["method"] for a in stacks["attempts"]]
            assert stacks["method"] == "" and methods == ["in-process", "py-spy", "faulthandler"]
        assert inc["targets"] == [3]
        action = wait_for(lambda: sc.incidents("action", job="stop4"), 30, what="kill")[0]
        assert list(action["outcomes"]) == ["3"]
        # Stopped: SIGKILLed as it is, never resumed for a SIGTERM handler.
        assert action["outcomes"]["3"]["signals"] == ["SIGKILL"]
        assert action["outcomes"]["3"]["signalled_first"] == "SIGKILL"
        assert w.wait(60)[3] is not None
        hangs = [r for r in sc.incidents("incident", job="stop4") if r["verdict"] != "DEGRADED"]
        assert [r["id"] for r in hangs] == [inc["id"]]
        # Definitive (the kernel says stopped): acted on at once, no patience.
        (dec,) = sc.incidents("decision", job="stop4")
        assert dec["rule"] == "stopped" and dec["definitive"] and dec["incident_id"] == inc["id"]


def test_rank_holding_the_gil_in_c_is_read_through_its_faulthandler_signal() -> None:
    """Rank 1 blocks in a C call that keeps the GIL; py-spy is switched off."""
    with (
        sidecar(
            "--heartbeat-timeout-s", "3", "--sync-timeout-s", "30", "--py-spy", "off", *NOW
        ) as sc,
        Workers(2, sc.target, short_tmpdir(), job_id="gil2", args=hang_args(1, 10, "gil")) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "gil2", timeout_s=180)
        d = inc["diagnosis"]
        assert d["culprits"] == [1] and inc["targets"] == [1]
        stacks = d["stacks"]["1"]
        # Its reporter is silent, so the in-process request (which would wait out
        # its timeout) comes last; the signal handler answers first.
        assert [a["method"] for a in stacks["attempts"]] == ["py-spy"]
        assert stacks["attempts"][0]["error"] == "py_spy=off"
        assert stacks["method"] == "faulthandler"
        assert stacks["where"].startswith("ddp_worker.py:") and "hold_gil_in_c" in stacks["where"]
        assert d["text"].endswith(f"rank 1 is stuck at {stacks['where']}")
        assert w.wait(60)[1] is not None


def test_ranks_over_tcp_from_another_host_are_one_job_with_the_local_ones() -> None:
    """Ranks 2 and 3 report over TCP as host "node-b"; rank 2 is the straggler.

    The sidecar cannot signal or py-spy a process on another host: it reads
    the stacks in process and kills through the Abort command.
    """
    port = free_port()
    remote = {
        "TRAINPROBE_TARGET": f"127.0.0.1:{port}",
        "TRAINPROBE_TOKEN": "t0ken",
        "TRAINPROBE_HOST": "node-b",
    }
    with (
        sidecar(
            "--listen",
            f"tcp://127.0.0.1:{port}",
            "--token",
            "t0ken",
            "--sync-timeout-s",
            "2",
            "--stall-timeout-s",
            "8",
            *NOW,
        ) as sc,
        Workers(
            4,
            sc.target,
            short_tmpdir(),
            job_id="tcp4",
            args=hang_args(2, 15, "sleep"),
            rank_env={2: remote, 3: remote},
        ) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "tcp4", timeout_s=180)
        d = inc["diagnosis"]
        assert d["kind"] == "straggler" and d["culprits"] == [2]
        assert "rank 2 on node-b never entered allreduce" in d["text"]
        assert d["stacks"]["2"]["method"] == "in-process"
        assert inc["targets"] == [2]
        action = wait_for(lambda: sc.incidents("action", job="tcp4"), 30, what="kill")[0]
        assert action["outcomes"]["2"]["method"] == "abort-command"
        assert w.wait(60)[2] is not None  # it ended itself on the sidecar's command
        hosts = {s.rank: s.host for s in sc.status("tcp4").workers}
        assert hosts[2] == hosts[3] == "node-b" and hosts[0] == hosts[1] != "node-b"


def test_peers_that_stay_stuck_are_swept_after_the_job_kill_grace() -> None:
    """Rank 1 is killed as the culprit; ranks 0 and 2 do not exit after the error
    (as NCCL peers would not): they are killed job_kill_grace_s later, without
    a second incident or DEAD noise."""
    args = [*hang_args(1, 12, "sleep"), "--after-error", "sleep"]
    with (
        sidecar(
            "--sync-timeout-s", "2", "--stall-timeout-s", "6", "--job-kill-grace-s", "3", *NOW
        ) as sc,
        Workers(3, sc.target, short_tmpdir(), job_id="sweep3", args=args) as w,
    ):
        inc = sc.wait_incident(lambda r: r["job_id"] == "sweep3", timeout_s=180)
        assert inc["diagnosis"]["culprits"] == [1] and inc["targets"] == [1]
        sweep = wait_for(
            lambda: [r for r in sc.incidents("action", job="sweep3") if r.get("phase")],
            60,
            what="sweep",
        )[0]
        assert sweep["phase"] == "job_kill_grace" and sweep["incident_id"] == inc["id"]
        assert sorted(sweep["outcomes"]) == ["0", "2"] and sweep["ok"] is True
        assert all(c is not None for c in w.wait(30))
        assert len(w.events("error")) == 2  # both peers saw rank 1's death and stayed
        assert [r["id"] for r in sc.incidents("incident", job="sweep3")] == [inc["id"]]
